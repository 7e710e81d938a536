#!/bin/sh
echo "bazel coverage is not supported in this offline workspace; use pytest-cov or gcov" >&2
exit 1
