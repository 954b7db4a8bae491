# The CUDA runtime of the GPU fast path: which one, and why.
#
# gpu/*.c is plain C over the CUDA runtime API (no kernels, no nvcc), linked
# with the static cudart so that the daemon starts on any machine, with or
# without a GPU or driver. The runtime's major version sets the oldest driver
# that can run it: CUDA 12 needs driver 525 or newer (minor version
# compatibility covers every 12.x), CUDA 13 needs 580. Nodes on the 535, 550
# and 570 drivers are common, so only a 12.x runtime is used:
#   1. MCFS_CUDA_ROOT, where deploy/install-deps.sh unpacks NVIDIA's
#      nvidia-cuda-runtime-cu12 wheel (headers, libcudart_static.a) and the
#      crt/ headers of nvidia-cuda-nvcc-cu12 (cuda_runtime_api.h includes
#      crt/host_defines.h, which the runtime wheel lacks);
#   2. else a CUDA toolkit that find_package(CUDAToolkit) finds, if it is 12.x.
# A CUDA 13 toolkit is never used. Without a 12.x runtime the GPU path is not
# built and says why (mcfs --version, the configure log).
#
# Sets MCFS_HAVE_CUDA, MCFS_GPU_BUILD (the text `mcfs --version` prints after
# "GPU fast path: ") and, with CUDA, the imported target mcfs_cudart.

# The environment variable of the same name moves it for install-deps.sh too.
if(DEFINED ENV{MCFS_CUDA_ROOT} AND NOT "$ENV{MCFS_CUDA_ROOT}" STREQUAL "")
  set(mcfs_cuda_root_default "$ENV{MCFS_CUDA_ROOT}")
else()
  set(mcfs_cuda_root_default "/opt/mcfs/cuda12")
endif()
set(MCFS_CUDA_ROOT "${mcfs_cuda_root_default}" CACHE PATH
    "CUDA 12 runtime (include/, lib/libcudart_static.a); deploy/install-deps.sh fills it")

# CUDART_VERSION (12090 for 12.9) from a cuda_runtime_api.h; 0 if unreadable.
function(mcfs_cudart_version header out)
  set(v 0)
  if(EXISTS "${header}")
    file(STRINGS "${header}" line REGEX "^#define[ \t]+CUDART_VERSION[ \t]+[0-9]+")
    if(line MATCHES "CUDART_VERSION[ \t]+([0-9]+)")
      set(v ${CMAKE_MATCH_1})
    endif()
  endif()
  set(${out} ${v} PARENT_SCOPE)
endfunction()

# Checks a runtime: include dir and library dir. Sets ${out}_OK, ${out}_LIB,
# ${out}_MAJOR, ${out}_MINOR and, when not usable, ${out}_WHY.
function(mcfs_cuda_probe inc libdirs out)
  set(ok FALSE)
  set(why "")
  set(lib "")
  foreach(d ${libdirs})
    if(NOT lib AND EXISTS "${d}/libcudart_static.a")
      set(lib "${d}/libcudart_static.a")
    endif()
  endforeach()
  mcfs_cudart_version("${inc}/cuda_runtime_api.h" v)
  math(EXPR major "${v} / 1000")
  math(EXPR minor "(${v} % 1000) / 10")
  if(v EQUAL 0)
    set(why "no cuda_runtime_api.h in ${inc}")
  elseif(NOT EXISTS "${inc}/crt/host_defines.h" OR NOT EXISTS "${inc}/cuda.h")
    set(why "${inc} lacks crt/host_defines.h or cuda.h (incomplete CUDA headers)")
  elseif(NOT lib)
    set(why "no libcudart_static.a beside ${inc}")
  elseif(NOT major EQUAL 12)
    set(why "${inc} holds CUDA ${major}.${minor}; only a 12.x runtime is used (12 runs on \
NVIDIA drivers from 525 on, 13 needs 580)")
  else()
    set(ok TRUE)
  endif()
  set(${out}_OK ${ok} PARENT_SCOPE)
  set(${out}_WHY "${why}" PARENT_SCOPE)
  set(${out}_LIB "${lib}" PARENT_SCOPE)
  set(${out}_MAJOR ${major} PARENT_SCOPE)
  set(${out}_MINOR ${minor} PARENT_SCOPE)
endfunction()

set(MCFS_HAVE_CUDA OFF)
if(NOT MCFS_CUDA)
  set(MCFS_GPU_BUILD "not built: configured with MCFS_CUDA=OFF")
else()
  mcfs_cuda_probe("${MCFS_CUDA_ROOT}/include" "${MCFS_CUDA_ROOT}/lib;${MCFS_CUDA_ROOT}/lib64" root)
  set(why "${MCFS_CUDA_ROOT}: ${root_WHY}")
  if(NOT EXISTS "${MCFS_CUDA_ROOT}")
    set(why "no CUDA 12 runtime in ${MCFS_CUDA_ROOT} (deploy/install-deps.sh puts it there)")
  endif()
  if(root_OK)
    set(cuda_inc "${MCFS_CUDA_ROOT}/include")
    set(cuda_lib "${root_LIB}")
    set(cuda_major ${root_MAJOR})
    set(cuda_minor ${root_MINOR})
  else()
    find_package(CUDAToolkit QUIET)
    if(CUDAToolkit_FOUND)
      list(GET CUDAToolkit_INCLUDE_DIRS 0 tk_inc)
      mcfs_cuda_probe("${tk_inc}" "${CUDAToolkit_LIBRARY_DIR}" tk)
      if(tk_OK)
        set(cuda_inc "${tk_inc}")
        set(cuda_lib "${tk_LIB}")
        set(cuda_major ${tk_MAJOR})
        set(cuda_minor ${tk_MINOR})
      else()
        string(APPEND why "; CUDA toolkit: ${tk_WHY}")
      endif()
    else()
      string(APPEND why "; no CUDA toolkit found")
    endif()
  endif()
  if(cuda_lib)
    set(MCFS_HAVE_CUDA ON)
    set(MCFS_GPU_BUILD "CUDA runtime ${cuda_major}.${cuda_minor}, linked statically; \
needs NVIDIA driver 525 or newer")
    add_library(mcfs_cudart STATIC IMPORTED)
    # The static runtime loads libcuda.so.1 with dlopen and uses clock_gettime
    # and threads: what CUDA::cudart_static adds, too.
    set_target_properties(mcfs_cudart PROPERTIES
      IMPORTED_LOCATION "${cuda_lib}"
      INTERFACE_INCLUDE_DIRECTORIES "${cuda_inc}"
      INTERFACE_LINK_LIBRARIES "Threads::Threads;${CMAKE_DL_LIBS};rt")
    message(STATUS "mcfs: GPU fast path: CUDA ${cuda_major}.${cuda_minor} runtime ${cuda_lib}")
  else()
    set(MCFS_GPU_BUILD "not built: ${why}")
    message(WARNING "mcfs: GPU fast path not built: ${why}")
  endif()
endif()
