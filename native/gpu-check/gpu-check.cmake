# tessera-gpu-check: included by native/CMakeLists.txt when TESSERA_GPU_CHECK_ONLY is on (the default without
# cmake-js), after the kernel source lists and their per-file ISA flags are set. It compiles the same kernel sources as
# the addons (cpp/core, the CPU kernels of cpp/cpu, the .cu files of cpp/cuda) without any N-API code, so it needs
# only CMake, a C++17 compiler and, for the CUDA part, nvcc.
#   -DTESSERA_GPU_CHECK_CUDA=OFF   build the CPU part only (the report then says "CUDA: skipped (...)")
#   -DCMAKE_CUDA_ARCHITECTURES=..  default 80;90, as tessera_cuda.node
option(TESSERA_GPU_CHECK_CUDA "Compile the CUDA part of tessera-gpu-check (needs nvcc)" ON)

set(TESSERA_GPU_CHECK_NO_CUDA_REASON "")
if(NOT TESSERA_GPU_CHECK_CUDA)
  set(TESSERA_GPU_CHECK_NO_CUDA_REASON "the CUDA part was not compiled: built with TESSERA_GPU_CHECK_CUDA=OFF")
else()
  include(CheckLanguage)
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    set(TESSERA_GPU_CHECK_NO_CUDA_REASON "the CUDA part was not compiled: nvcc was not found at build time")
  endif()
endif()

if(TESSERA_GPU_CHECK_NO_CUDA_REASON STREQUAL "")
  # Before the target exists: it takes its CUDA architectures and standard from these variables.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)  # as tessera_cuda.node: A100 and H100/H200
  endif()
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  find_package(CUDAToolkit REQUIRED)
endif()

set(TESSERA_GPU_CHECK_DIR ${CMAKE_SOURCE_DIR}/gpu-check/src)
add_executable(tessera-gpu-check
  ${TESSERA_GPU_CHECK_DIR}/main.cc ${TESSERA_GPU_CHECK_DIR}/report.cc ${TESSERA_GPU_CHECK_DIR}/checks.cc
  ${TESSERA_GPU_CHECK_DIR}/cpu_target.cc ${TESSERA_GPU_CHECK_DIR}/cpu_bench.cc ${TESSERA_CORE_SRC} ${TESSERA_CPU_KERNEL_SRC})
target_compile_options(tessera-gpu-check PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${TESSERA_CPU_COMPILE_OPTIONS}>)
target_link_libraries(tessera-gpu-check PRIVATE pthread)

if(TESSERA_GPU_CHECK_NO_CUDA_REASON STREQUAL "")
  file(GLOB TESSERA_CUDA_KERNEL_SRC CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/cpp/cuda/*.cu)
  target_sources(tessera-gpu-check PRIVATE ${TESSERA_CUDA_KERNEL_SRC} ${TESSERA_GPU_CHECK_DIR}/cuda_target.cc
    ${TESSERA_GPU_CHECK_DIR}/cuda_bench.cc)
  # On main.cc alone (the one file that reads it), so switching the CUDA part on or off recompiles nothing else.
  set_source_files_properties(${TESSERA_GPU_CHECK_DIR}/main.cc PROPERTIES COMPILE_DEFINITIONS TESSERA_GPU_CHECK_CUDA=1)
  # The addon's CUDA flags: no --use_fast_math (kernels keep IEEE division, sqrt and denormals).
  target_compile_options(tessera-gpu-check PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-O3 -lineinfo>)
  target_link_libraries(tessera-gpu-check PRIVATE CUDA::cudart_static)
  message(STATUS "tessera: building tessera-gpu-check with its CUDA part (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
    "architectures ${CMAKE_CUDA_ARCHITECTURES})")
else()
  set_source_files_properties(${TESSERA_GPU_CHECK_DIR}/main.cc PROPERTIES
    COMPILE_DEFINITIONS "TESSERA_GPU_CHECK_NO_CUDA_REASON=\"${TESSERA_GPU_CHECK_NO_CUDA_REASON}\"")
  message(STATUS "tessera: building tessera-gpu-check without its CUDA part (${TESSERA_GPU_CHECK_NO_CUDA_REASON})")
  # Where the CUDA headers exist, still compile (not link) the check's own CUDA-side host code, so a CPU-only build
  # (CI's) catches its errors in seconds; the .cu kernels themselves are compiled by the addon build.
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    add_library(tessera-gpu-check-cuda-host OBJECT ${TESSERA_GPU_CHECK_DIR}/main.cc ${TESSERA_GPU_CHECK_DIR}/cuda_target.cc
      ${TESSERA_GPU_CHECK_DIR}/cuda_bench.cc)
    target_compile_definitions(tessera-gpu-check-cuda-host PRIVATE TESSERA_GPU_CHECK_CUDA=1)
    target_compile_options(tessera-gpu-check-cuda-host PRIVATE ${TESSERA_CPU_COMPILE_OPTIONS})
    target_include_directories(tessera-gpu-check-cuda-host PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
    add_dependencies(tessera-gpu-check tessera-gpu-check-cuda-host)
    message(STATUS "tessera: compiling the check's CUDA host code against ${CUDAToolkit_INCLUDE_DIRS} (not linked)")
  endif()
endif()
