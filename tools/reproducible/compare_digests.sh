#!/usr/bin/env bash
# Compares two `sha256sum` listings of the same build made twice (check_reproducible.sh):
#
#   tools/reproducible/compare_digests.sh FIRST SECOND MIN_FILES
#
# Exit 0 only when both list the same files, at least MIN_FILES of them, with the
# same digests; 1 otherwise (a missing or short listing, another set of files, or
# the files that differ), saying which.
set -uo pipefail
[[ $# == 3 ]] || { echo "usage: compare_digests.sh FIRST SECOND MIN_FILES" >&2; exit 2; }
first="$1" second="$2" min="$3"
for listing in "$first" "$second"; do
  [[ -r "$listing" ]] || { echo "NOT reproducible: no listing $listing"; exit 1; }
  count="$(grep -c . "$listing")"
  ((count >= min)) || { echo "NOT reproducible: $listing lists $count files, expected at least $min"; exit 1; }
done
if ! diff <(awk '{print $2}' "$first" | sort) <(awk '{print $2}' "$second" | sort) >/dev/null; then
  echo "NOT reproducible: the two builds wrote different files:"
  diff <(awk '{print $2}' "$first" | sort) <(awk '{print $2}' "$second" | sort) | grep '^[<>]' | sed 's/^/  /'
  exit 1
fi
if diff <(sort -k2 "$first") <(sort -k2 "$second") >/dev/null; then
  echo "reproducible: $(grep -c . "$first") outputs bit-identical"
  exit 0
fi
echo "NOT reproducible: these outputs differ between the two builds:"
join -j 2 <(sort -k2 "$first") <(sort -k2 "$second") | awk '$2 != $3 {print "  " $1}'
exit 1
