#!/bin/sh
# node-test.sh [node --test options and files]: `node --test` that fails
# fast instead of hanging. Each test file is stopped past NODE_TEST_TIMEOUT
# ms (--test-timeout; node 20.11 and later). Debian 12's own nodejs (18.20)
# has no such option and refuses it, so there the whole run is stopped past
# NODE_SUITE_TIMEOUT s instead (coreutils timeout: SIGTERM to the runner and
# its test processes, whose helpers then SIGKILL the daemons they started;
# SIGKILL 10 s later).
if node --test-timeout=1 -e 0 >/dev/null 2>&1; then
    exec node --test --test-timeout="${NODE_TEST_TIMEOUT:-600000}" "$@"
fi
exec timeout -k 10 "${NODE_SUITE_TIMEOUT:-7200}" node --test "$@"
