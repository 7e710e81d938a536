#!/bin/sh
# A test that takes SLOW_TEST_SECONDS (default 20): tools/rbe/check_faults.sh
# breaks the executor while it runs.
sleep "${SLOW_TEST_SECONDS:-20}"
echo "slept ${SLOW_TEST_SECONDS:-20} s"
