# Every command answers --help with exit code 0 and a usage line.
source "$(dirname "$0")/lib.sh"
for cmd in "" run show audit ls stats gc verify bench zoo; do
  expect_exit 0 "$TC" $cmd --help
  grep -qi "usage" "$TMP/out" || fail "'$cmd --help' printed no usage"
done
expect_exit 0 "$TC" --version
echo ok
