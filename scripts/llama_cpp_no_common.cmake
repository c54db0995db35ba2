# Read by llama-cpp-python's build just before its vendored llama.cpp's project() (the Makefile passes it
# as CMAKE_PROJECT_llama.cpp_INCLUDE_BEFORE). llama-cpp-python forces LLAMA_BUILD_COMMON on, but its
# Python bindings load only libllama and libggml*: llama.cpp's common library and cpp-httplib (53 of
# the build's 127 compiler runs, about half its CPU time here) were built only to be installed beside
# the package, unused. The libraries the bindings load are compiled and linked by the same commands.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama.cpp: build common utils library" FORCE)
