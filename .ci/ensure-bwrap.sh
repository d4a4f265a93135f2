#!/usr/bin/env bash
# bubblewrap isolates LLM-written verifiers (fabrika.sandbox). `make test` and CI both call this:
# install it with apt when we are root, else say loudly that the sandbox tests will be skipped
# (or fail: with CI=true or FABRIKA_REQUIRE_BWRAP=1 a missing bwrap fails them).
if command -v bwrap >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing bubblewrap for the sandbox tests (apt-get install bubblewrap)" >&2
  if (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap) >/dev/null 2>&1 \
      && command -v bwrap >/dev/null 2>&1; then
    exit 0
  fi
fi
echo "!!! bubblewrap is NOT installed and could not be installed here: the sandbox tests that need it will be" \
     "SKIPPED (FAIL with CI=true). Install it: sudo apt-get install bubblewrap" >&2
exit 0
