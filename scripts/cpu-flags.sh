#!/usr/bin/env bash
# native_fixes: the C/C++ flags that keep llama.cpp's native build (-march=native) runnable
# inside Python. On a CPU with AMX, -march=native compiles ggml's AMX kernels; in a Python
# process the kernel's AMX permission request fails (seen on 2026-12-01: a C program gets
# it, llama-cpp-python dies with SIGILL on `tileloadd` at the first llama_decode), so AMX is
# left out. Sourced by setup.sh and build-llama-server.sh.
native_fixes() {
  command -v gcc >/dev/null || return 0
  local target  # read whole first: `| grep -q` would end gcc early, and pipefail says no
  target=$(gcc -march=native -Q --help=target 2>/dev/null) || return 0
  if grep -qE -- '-mamx-tile[[:space:]]+\[enabled\]' <<<"$target"; then
    echo "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  fi
}
