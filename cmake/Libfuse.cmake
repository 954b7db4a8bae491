# Which libfuse mcfs builds against, and what it can do.
#
# MCFS_LIBFUSE_PREFIX picks the library:
#   auto    (default) the private build of deploy/build-libfuse.sh in
#           /opt/mcfs/libfuse when there is one, else the system's
#   system  the system's (pkg-config fuse3): Debian 12's 3.14
#   PATH    a prefix holding lib/pkgconfig/fuse3.pc
# A private prefix is linked with an rpath to its lib/, in the build tree and
# once installed, so the system's libfuse3.so.3 and fusermount3 stay in place.
#
# The features are then detected by compiling and linking against the chosen
# headers and library (never by a file's presence or a version number alone),
# and fs/ gets one definition per feature:
#   MCFS_FUSE_PASSTHROUGH  fuse_passthrough_open() and FUSE_CAP_PASSTHROUGH (3.17)
#   MCFS_FUSE_IO_URING     FUSE_CAP_OVER_IO_URING and fuse_req_is_uring() (3.18)
#   MCFS_FUSE_MAX_PAGES    conn->max_write above 1 MiB is honoured: 3.17.2 sizes
#                          its buffers from the INIT reply (3.17.0/1 raced on
#                          that, 3.14 caps max_write at 1 MiB). No symbol says
#                          so, hence a check of the headers' version macros.
set(MCFS_LIBFUSE_PREFIX "auto" CACHE STRING
    "libfuse to build against: auto (/opt/mcfs/libfuse if built, else system), system, or a prefix")
set(MCFS_LIBFUSE_PRIVATE_DEFAULT "/opt/mcfs/libfuse")

set(_fuse_prefix "")
if(MCFS_LIBFUSE_PREFIX STREQUAL "auto")
  # Only the default location is looked for here; what it can do is checked below.
  if(EXISTS "${MCFS_LIBFUSE_PRIVATE_DEFAULT}/lib/pkgconfig/fuse3.pc")
    set(_fuse_prefix "${MCFS_LIBFUSE_PRIVATE_DEFAULT}")
  endif()
elseif(NOT MCFS_LIBFUSE_PREFIX STREQUAL "system")
  if(NOT EXISTS "${MCFS_LIBFUSE_PREFIX}/lib/pkgconfig/fuse3.pc")
    message(FATAL_ERROR "MCFS_LIBFUSE_PREFIX=${MCFS_LIBFUSE_PREFIX}: no lib/pkgconfig/fuse3.pc "
                        "there (expected auto, system, or a prefix that deploy/build-libfuse.sh "
                        "installed into)")
  endif()
  set(_fuse_prefix "${MCFS_LIBFUSE_PREFIX}")
endif()

# pkg-config takes a .pc file's path as a module: the module argument then
# differs between the two choices, so pkg_check_modules checks again when the
# choice changes instead of keeping the cached result. The libraries it found
# are cached apart (pkgcfg_lib_FUSE3_*): forget them too, or a build directory
# switched from one libfuse to the other would keep linking the first.
get_cmake_property(_cached CACHE_VARIABLES)
foreach(v ${_cached})
  if(v MATCHES "^pkgcfg_lib_FUSE3_")
    unset(${v} CACHE)
  endif()
endforeach()
if(_fuse_prefix)
  pkg_check_modules(FUSE3 REQUIRED IMPORTED_TARGET "${_fuse_prefix}/lib/pkgconfig/fuse3.pc")
  set(MCFS_LIBFUSE_RPATH "${_fuse_prefix}/lib")
else()
  pkg_check_modules(FUSE3 REQUIRED IMPORTED_TARGET fuse3)
  set(MCFS_LIBFUSE_RPATH "")
endif()

include(CheckCSourceCompiles)
include(CMakePushCheckState)
cmake_push_check_state(RESET)
set(CMAKE_REQUIRED_INCLUDES ${FUSE3_INCLUDE_DIRS})
set(CMAKE_REQUIRED_LIBRARIES ${FUSE3_LINK_LIBRARIES})
# The same API level as fs/fs_int.h.
set(CMAKE_REQUIRED_DEFINITIONS -DFUSE_USE_VERSION=312 -D_GNU_SOURCE)
set(CMAKE_REQUIRED_QUIET ON)
# Results are cached by name: forget them so that a new choice is checked anew.
foreach(v MCFS_FUSE_PASSTHROUGH MCFS_FUSE_IO_URING MCFS_FUSE_MAX_PAGES)
  unset(${v} CACHE)
endforeach()
check_c_source_compiles("
#include <fuse_lowlevel.h>
int main(void)
{
	unsigned long cap = FUSE_CAP_PASSTHROUGH;
	int (*open_fn)(fuse_req_t, int) = fuse_passthrough_open;
	int (*close_fn)(fuse_req_t, int) = fuse_passthrough_close;
	return cap == 0 || !open_fn || !close_fn;
}" MCFS_FUSE_PASSTHROUGH)
check_c_source_compiles("
#include <fuse_lowlevel.h>
int main(void)
{
	unsigned long cap = FUSE_CAP_OVER_IO_URING;
	_Bool (*is_uring)(fuse_req_t) = fuse_req_is_uring;
	return cap == 0 || !is_uring;
}" MCFS_FUSE_IO_URING)
check_c_source_compiles("
#include <fuse_lowlevel.h>
#if FUSE_MAJOR_VERSION == 3 && (FUSE_MINOR_VERSION < 17 || (FUSE_MINOR_VERSION == 17 && FUSE_HOTFIX_VERSION < 2))
#error libfuse before 3.17.2 caps requests at 1 MiB
#endif
int main(void)
{
	struct fuse_conn_info c = {0};
	c.max_write = 8u << 20;
	return (int)(c.max_write == 0);
}" MCFS_FUSE_MAX_PAGES)
cmake_pop_check_state()

set(MCFS_FUSE_DEFS "")
foreach(v MCFS_FUSE_PASSTHROUGH MCFS_FUSE_IO_URING MCFS_FUSE_MAX_PAGES)
  if(${v})
    list(APPEND MCFS_FUSE_DEFS ${v})
    set(_${v} yes)
  else()
    set(_${v} no)
  endif()
endforeach()
set(_where "system")
if(_fuse_prefix)
  set(_where "${_fuse_prefix}")
endif()
message(STATUS "mcfs: libfuse ${FUSE3_VERSION} (${_where}): passthrough ${_MCFS_FUSE_PASSTHROUGH}, "
               "io_uring ${_MCFS_FUSE_IO_URING}, requests over 1 MiB ${_MCFS_FUSE_MAX_PAGES}")
