"""Counts test cases from Bazel's Build Event Protocol files.

    bazel test //... --build_event_json_file=/tmp/cpu.json
    python tools/test_summary.py /tmp/cpu.json [/tmp/cuda.json ...]

Bazel's own summary counts test targets; this reads each target's test.xml
(JUnit XML that pytest_test writes) and prints one line per target and a last
line `N passed, N failed, N skipped` counting test cases over all the files,
each one invocation, named by its file's stem (and, with --checks,
the results of checks run outside Bazel). A target that failed
to build, crashed, or timed out without a failing case in its XML counts as one
failed case, so no failure goes uncounted. Exit status 1 if anything failed
(or, with --require-cached, if any test ran instead of coming from a cache).
"""

import argparse
import json
import os
import sys
import xml.etree.ElementTree as ET
from urllib.parse import unquote, urlparse

_NOT_RUN = {"FAILED_TO_BUILD", "NO_STATUS", "INCOMPLETE", "REMOTE_FAILURE", "TOOL_HALTED_BEFORE_TESTING"}


def read_events(path):
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                yield json.loads(line)


def count_cases(xml_path):
    """(passed, failed, skipped) test cases in a JUnit XML file, or None if unreadable."""
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError):
        return None
    passed = failed = skipped = 0
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped


class Target:
    def __init__(self, label):
        self.label = label
        self.status = None      # the testSummary's overall status
        self.results = {}       # (run, shard) -> (status, test.xml path, cached)
        self.skipped = False    # incompatible with the configuration

    def counts(self):
        if self.skipped:
            return 0, 0, 1
        passed = failed = skipped = 0
        for status, xml, _ in self.results.values():
            cases = count_cases(xml) if xml else None
            if cases is None:
                cases = (1, 0, 0) if status == "PASSED" else (0, 1, 0)
            elif status != "PASSED" and cases[1] == 0:
                cases = (cases[0], 1, cases[2])  # timeout or crash after the XML was written
            passed, failed, skipped = passed + cases[0], failed + cases[1], skipped + cases[2]
        if not self.results and self.status in _NOT_RUN:
            failed += 1
        return passed, failed, skipped


def summarise(path):
    """The test targets of one Bazel invocation, by label."""
    targets = {}
    tests = set()  # labels of test rules; other skipped targets are not counted

    def target(label):
        return targets.setdefault(label, Target(label))

    for event in read_events(path):
        ident = event.get("id", {})
        if "targetConfigured" in ident and "testSize" in event.get("configured", {}):
            tests.add(ident["targetConfigured"]["label"])
        elif "testResult" in ident:
            key = ident["testResult"]
            result = event.get("testResult", {})
            xml = None
            for output in result.get("testActionOutput", []):
                if output.get("name") == "test.xml" and output.get("uri", "").startswith("file://"):
                    xml = unquote(urlparse(output["uri"]).path)
            # Later attempts (flaky retries) replace earlier ones.
            target(key["label"]).results[(key.get("run", 1), key.get("shard", 1))] = (
                result.get("status", "NO_STATUS"), xml,
                # From the local action cache, or the disk/remote cache.
                bool(result.get("cachedLocally")
                     or result.get("executionInfo", {}).get("cachedRemotely")))
        elif "testSummary" in ident:
            target(ident["testSummary"]["label"]).status = \
                event.get("testSummary", {}).get("overallStatus")
        elif "targetCompleted" in ident and event.get("aborted", {}).get("reason") == "SKIPPED":
            target(ident["targetCompleted"]["label"]).skipped = True
    return {label: t for label, t in targets.items() if label in tests}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bep_files", nargs="+", help="files written by --build_event_json_file")
    parser.add_argument("--require-cached", action="store_true",
                        help="fail unless every test result came from a cache (none ran)")
    parser.add_argument("--checks", help="a file of 'PASSED name' / 'FAILED name' lines from "
                                         "checks run outside Bazel (.ci/run's), counted too")
    args = parser.parse_args(argv)
    totals = [0, 0, 0]
    rows = []
    for path in args.bep_files:
        # Each file is one invocation (one configuration), named for the file: cpu.json -> cpu.
        config = os.path.splitext(os.path.basename(path))[0]
        rows += [("%s [%s]" % (label, config), t) for label, t in summarise(path).items()]
    for label, target in sorted(rows):
        counts = target.counts()
        totals = [t + c for t, c in zip(totals, counts)]
        if target.skipped:
            state = "SKIPPED"
        else:
            state = "FAILED" if counts[1] else "PASSED"
            if any(cached for _, _, cached in target.results.values()):
                state += " (cached)"
        print("%-14s %-60s %d passed, %d failed, %d skipped" % ((state, label) + counts))
    if args.require_cached:
        ran = [label for label, t in rows for _, _, cached in t.results.values() if not cached]
        results = sum(len(t.results) for _, t in rows)
        for label in ran:
            print("NOT CACHED     %s" % label)
        print("%d of %d test results from the cache" % (results - len(ran), results))
        if ran or not results:
            return 1
    if args.checks:
        with open(args.checks) as f:
            for line in f:
                state, _, name = line.strip().partition(" ")
                if state in ("PASSED", "FAILED"):
                    totals[1 if state == "FAILED" else 0] += 1
                    print("%-14s %s" % (state, "check " + name))
    print("%d passed, %d failed, %d skipped" % tuple(totals))
    return 1 if totals[1] else 0


if __name__ == "__main__":
    sys.exit(main())
