# What mcfs installs, and the Debian package that carries it (CPack).
#
#   cmake -S . -B build -DCMAKE_INSTALL_PREFIX=/usr && cmake --build build
#   (cd build && cpack)            # build/mcfs_VERSION_ARCH.deb
#   apt install ./build/mcfs_*.deb # what deploy/quickstart.sh does
#
# The package holds the daemon, libmcfs.so.2 (and its links), the headers of
# include/mcfs, the man page, the systemd unit, /etc/mcfs/mcfs.conf (a
# conffile: `dpkg -r` keeps it, `dpkg --purge` removes it) and the docs.
# The Python package is not in it: it installs with pip alone (gpu/python),
# so that pip knows what it installed and can remove it.
#
# libfuse: when mcfs is built against the private libfuse of
# deploy/build-libfuse.sh (Debian 12's own is 3.14), that library goes into
# the package too, in <prefix>/lib/mcfs, and mcfs finds it through the rpath
# $ORIGIN/../lib/mcfs: the package works on any Debian 12 machine, with or
# without /opt/mcfs/libfuse, and the system's libfuse3 and fusermount3 stay
# what other programs use. Built against the system's libfuse, the package
# depends on libfuse3-3 instead (dpkg-shlibdeps finds it).
include(GNUInstallDirs)

install(TARGETS mcfs RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(MCFS_LIBFUSE_RPATH)
  # The build tree's binary runs with the private prefix's lib/ (its rpath is
  # set at link time: CMake would otherwise append ':' to the build tree's for
  # the install step to rewrite, and an empty entry is the current
  # directory); the installed one with the copy beside it, its rpath
  # rewritten in place (no longer than the old one, as RPATH_CHANGE needs).
  set_target_properties(mcfs PROPERTIES INSTALL_RPATH "${MCFS_LIBFUSE_RPATH}"
                                        BUILD_WITH_INSTALL_RPATH ON)
  install(CODE "file(RPATH_CHANGE FILE \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/mcfs\"
                     OLD_RPATH \"${MCFS_LIBFUSE_RPATH}\" NEW_RPATH \"\$ORIGIN/../lib/mcfs\")")
  # the runtime library and its soname link, not the -dev link (libfuse3.so)
  file(GLOB _fuse_libs "${MCFS_LIBFUSE_RPATH}/libfuse3.so.*")
  install(FILES ${_fuse_libs} DESTINATION lib/mcfs)
endif()
install(TARGETS mcfs_client LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
                            ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# libmcfs's API: mcfs_client.h includes the other two by name from its own
# directory, so a program includes <mcfs/mcfs_client.h> and links -lmcfs.
install(FILES include/mcfs/mcfs_ioctl.h gpu/libmcfs/mcfs_client.h gpu/safetensors.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mcfs)

# The unit names the installed binary: the copy installed is the tree's
# deploy/mcfs.service with its paths made those of this prefix (/usr/bin/mcfs
# in the package; the tree's file says /usr/local/bin/mcfs).
file(READ ${CMAKE_SOURCE_DIR}/deploy/mcfs.service _unit)
string(REPLACE "/usr/local/bin/mcfs" "${CMAKE_INSTALL_FULL_BINDIR}/mcfs" _unit "${_unit}")
string(REPLACE "/usr/local/share/doc/mcfs" "${CMAKE_INSTALL_FULL_DOCDIR}" _unit "${_unit}")
file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/deploy/mcfs.service CONTENT "${_unit}" @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/deploy/mcfs.service DESTINATION lib/systemd/system)
# /etc/mcfs/mcfs.conf, which the unit reads: with the prefix /usr (the
# package's, where it is a conffile that dpkg never overwrites once edited).
# Another prefix's install (`cmake --install`, /usr/local) would overwrite an
# admin's edited file on every install, so there it is left to the admin
# (the example is in the docs directory).
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  install(FILES deploy/mcfs.conf.example DESTINATION /etc/mcfs RENAME mcfs.conf)
endif()
install(FILES README.md deploy/mcfs.conf.example DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES deploy/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} RENAME README.deploy.md)
install(DIRECTORY deploy/k8s DESTINATION ${CMAKE_INSTALL_DOCDIR})

# The man page, from docs/mcfs.8.scd (scdoc; deploy/install-deps.sh installs
# it). Without scdoc the build goes on without the page, and says so.
find_program(MCFS_SCDOC scdoc)
if(MCFS_SCDOC)
  set(_man ${CMAKE_BINARY_DIR}/docs/mcfs.8)
  add_custom_command(OUTPUT ${_man} ${_man}.gz
                     COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/docs
                     COMMAND ${MCFS_SCDOC} < ${CMAKE_SOURCE_DIR}/docs/mcfs.8.scd > ${_man}
                     COMMAND gzip -9nc ${_man} > ${_man}.gz
                     DEPENDS ${CMAKE_SOURCE_DIR}/docs/mcfs.8.scd
                     COMMENT "man page: docs/mcfs.8.scd -> mcfs.8" VERBATIM)
  add_custom_target(man ALL DEPENDS ${_man} ${_man}.gz)
  install(FILES ${_man}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man8)
else()
  message(WARNING "mcfs: scdoc not found: no man page (deploy/install-deps.sh build installs scdoc)")
endif()

# The Debian package.
file(STRINGS ${CMAKE_SOURCE_DIR}/common/mcfs.h _v REGEX "^#define MCFS_VERSION ")
string(REGEX REPLACE ".*\"(.*)\".*" "\\1" MCFS_PKG_VERSION "${_v}")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME mcfs)
set(CPACK_PACKAGE_VERSION ${MCFS_PKG_VERSION})
set(CPACK_PACKAGE_CONTACT "mcfs maintainers <mcfs@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "model cache file system for GPU inference nodes")
set(CPACK_PACKAGE_DESCRIPTION
    "mcfs mounts a directory of models kept in a local or NAS directory, an HTTP server or an\n"
    "S3-compatible bucket as a read-only FUSE file system, fetching blocks in parallel and\n"
    "caching them in RAM and on disk. With the daemon: libmcfs, its headers, the systemd unit\n"
    "and the man page.")
string(REPLACE ";" "" CPACK_PACKAGE_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION}")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # mcfs_VERSION_ARCH.deb
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
# Installed with DESTDIR, so that /etc/mcfs (absolute) lands in the package.
set(CPACK_SET_DESTDIR ON)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
# The shared libraries' packages from dpkg-shlibdeps (libcurl4, liburing2,
# liblmdb0, libinih1, libxxhash0, libcjson1, libexpat1, libssl3,
# libmicrohttpd12, libnuma1 through the private libfuse, or libfuse3-3), at
# the versions this build saw; fuse3 by hand: mount.fuse3 (mount -t
# fuse.mcfs, fstab) and fusermount3 (a daemon that is not root).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS "${MCFS_LIBFUSE_RPATH}")
set(CPACK_DEBIAN_PACKAGE_DEPENDS "fuse3")
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON) # libmcfs.so.2's shlibs file
set(_ctl ${CMAKE_BINARY_DIR}/deploy/debian)
file(MAKE_DIRECTORY ${_ctl})
set(_extra ${_ctl}/triggers ${_ctl}/postinst ${_ctl}/prerm ${_ctl}/postrm)
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  file(WRITE ${_ctl}/conffiles "/etc/mcfs/mcfs.conf\n")
  list(APPEND _extra ${_ctl}/conffiles)
endif()
file(WRITE ${_ctl}/triggers "activate-noawait ldconfig\n") # libmcfs.so.2 in ld.so's cache
set(MCFS_CACHE_DIR /var/cache/mcfs) # cache_dir's default (config/cfg.c)
set(MCFS_ETC_DIR /etc/mcfs)
foreach(s postinst prerm postrm)
  configure_file(${CMAKE_SOURCE_DIR}/deploy/debian/${s} ${_ctl}/${s} @ONLY
                 FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ
                                  GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
endforeach()
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${_extra})
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
