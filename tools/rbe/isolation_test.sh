#!/bin/sh
# Run remotely by tools/rbe/check_rbe.sh: proves an action cannot read what it
# did not declare. Inside the action, no file may be visible under FORBIDDEN
# (colon-separated: the workspace, $HOME, the host's CUDA toolkits) except under
# ALLOWED (the executor image: the Python environment and its base interpreter),
# which must be there.
status=0
prune=""
IFS=:
for path in $ALLOWED; do
  if [ -x "$path/bin/python3" ]; then echo "ok: $path (executor image) is visible"
  else echo "FAIL: $path, part of the executor image, is missing"; status=1; fi
  prune="$prune -path $path -prune -o"
done
for path in $FORBIDDEN; do
  # shellcheck disable=SC2086  # $prune is a list of find arguments
  seen="$(IFS=' '; find "$path" $prune -type f -print 2>/dev/null | head -5)"
  if [ -n "$seen" ]; then
    echo "FAIL: the action can read undeclared files in $path, e.g.:"; echo "$seen"
    status=1
  else
    echo "ok: no file of $path is visible to the action"
  fi
done
[ -n "$FORBIDDEN" ] || { echo "FAIL: FORBIDDEN is not set"; status=1; }
exit $status
