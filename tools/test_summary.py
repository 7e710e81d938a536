"""Counts test cases from Bazel's Build Event Protocol files, and fails on anything else that failed.

    bazel test //... --build_event_json_file=/tmp/cpu.json
    python tools/test_summary.py /tmp/cpu.json [/tmp/cuda.json ...] [--checks F --expect-checks a,b]

Bazel's own summary counts test targets; this reads each target's test.xml
(JUnit XML that pytest_test writes) and prints one line per target and a last
line `N passed, N failed, N skipped` counting test cases over all the files,
each one invocation, named by its file's stem (and, with --checks, the results
of checks run outside Bazel). Whatever else can fail counts as one failed case
with a line saying what, so CI cannot end green on it: a target that failed to
build or analyse (test or not), a test with no result, a FLAKY test (it failed
once), a test that timed out or crashed after writing passing cases, an
invocation with no test, one that exited non-zero for another reason than
failed tests, one whose event file is missing, empty or unfinished, and an
expected check that did not run. Exit status 1 if anything failed (or, with
--require-cached, if any test ran instead of coming from a cache).
"""

import argparse
import json
import os
import sys
import xml.etree.ElementTree as ET
from urllib.parse import unquote, urlparse

_NOT_RUN = {"FAILED_TO_BUILD", "NO_STATUS", "INCOMPLETE", "REMOTE_FAILURE", "TOOL_HALTED_BEFORE_TESTING"}
_TESTS_FAILED = 3  # bazel test's exit code when the build passed and some test failed


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
        self.expected = False   # to be run (not filtered out by tags)

    def state(self):
        if self.skipped:
            return "SKIPPED"
        if self.status == "FLAKY":
            return "FLAKY"
        if not self.results and self.status is None:
            return "NO RESULT" if self.expected else "NOT RUN"  # left out by --test_tag_filters
        return "FAILED" if self.counts()[1] else "PASSED"

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
        no_result = self.status in _NOT_RUN or (self.expected and self.status is None)
        if (not self.results and no_result) or (self.status == "FLAKY" and not failed):
            failed += 1
        return passed, failed, skipped


class Invocation:
    """One event file: its test targets by label, and failures that are not test cases."""

    def __init__(self):
        self.targets = {}
        self.tests = set()      # labels of test rules; other skipped targets are not counted
        self.errors = []        # (label, why) of whatever else failed
        self.exit_code = None   # None: no buildFinished event

    def target(self, label):
        return self.targets.setdefault(label, Target(label))

    def read(self, event):
        ident, label = event.get("id", {}), None
        for kind in ("targetConfigured", "configuredLabel", "targetCompleted", "testResult", "testSummary"):
            label = ident.get(kind, {}).get("label", label)
        aborted = event.get("aborted")
        if "pattern" in ident:
            label = "(pattern %s)" % " ".join(ident["pattern"].get("pattern", []))
        if aborted and aborted.get("reason") != "SKIPPED":
            if label not in {seen for seen, _ in self.errors}:  # a target's failure is told twice
                self.errors.append((label or "(build)", "%s: %s" % (
                    aborted.get("reason", "ABORTED"), aborted.get("description", "").strip()[:300])))
        elif "targetConfigured" in ident and "testSize" in event.get("configured", {}):
            self.tests.add(label)
        elif "testResult" in ident:
            self.add_result(ident["testResult"], event.get("testResult", {}))
        elif "testSummary" in ident:
            self.target(label).status = event.get("testSummary", {}).get("overallStatus")
        elif "targetCompleted" in ident and aborted:
            self.target(label).skipped = True
        elif "targetCompleted" in ident:
            # A test to be run announces its summary; one left out by --test_tag_filters does not.
            self.target(label).expected = any("testSummary" in c for c in event.get("children", []))
            if not event.get("completed", {}).get("success") and label not in self.tests:
                self.errors.append((label, "failed to build"))
        elif "buildFinished" in ident:
            self.exit_code = event.get("finished", {}).get("exitCode", {}).get("code", 0)

    def add_result(self, key, result):
        xml = None
        for output in result.get("testActionOutput", []):
            if output.get("name") == "test.xml" and output.get("uri", "").startswith("file://"):
                xml = unquote(urlparse(output["uri"]).path)
        # Later attempts (flaky retries) replace earlier ones.
        self.target(key["label"]).results[(key.get("run", 1), key.get("shard", 1))] = (
            result.get("status", "NO_STATUS"), xml,
            # From the local action cache, or the disk/remote cache.
            bool(result.get("cachedLocally") or result.get("executionInfo", {}).get("cachedRemotely")))

    def test_targets(self):
        return {label: self.target(label) for label in sorted(self.tests)}

    def finish(self):
        """The invocation-level failures, once every event is read."""
        tests = self.test_targets()
        failed_tests = any(t.counts()[1] for t in tests.values())
        if self.exit_code is None:
            self.errors.append(("(invocation)", "the event file ends before the build finished"))
        elif self.exit_code != 0 and not (self.exit_code == _TESTS_FAILED and failed_tests):
            self.errors.append(("(invocation)", "bazel exited with code %d" % self.exit_code))
        if not tests:
            self.errors.append(("(invocation)", "no test target was configured"))


def summarise(path):
    """The Invocation of one event file; a missing or unreadable file is one error."""
    invocation = Invocation()
    try:
        for event in read_events(path):
            invocation.read(event)
    except (OSError, ValueError) as e:
        invocation.errors.append(("(invocation)", "cannot read %s: %s" % (path, e)))
    invocation.finish()
    return invocation


def read_checks(path, expected):
    """(state, name, why) of the checks in a file of 'PASSED name' / 'FAILED name[: why]'
    lines; an expected one missing fails."""
    found = []
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                state, _, rest = line.strip().partition(" ")
                name, _, why = rest.partition(": ")
                if state in ("PASSED", "FAILED"):
                    found.append((state, name, why))
    seen = {name for _, name, _ in found}
    return found + [("FAILED", name, "expected, never ran") for name in expected if name not in seen]


def report_cache(rows):
    """--require-cached: the tests that ran; True when every result came from a cache."""
    ran = [label for label, t in rows for _, _, cached in t.results.values() if not cached]
    results = sum(len(t.results) for _, t in rows)
    for label in ran:
        print("NOT CACHED     %s" % label)
    print("%d of %d test results from the cache" % (results - len(ran), results))
    return results > 0 and not ran


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bep_files", nargs="+", help="files written by --build_event_json_file")
    parser.add_argument("--require-cached", action="store_true",
                        help="fail unless every test result came from a cache (none ran)")
    parser.add_argument("--checks", help="a file of 'PASSED name' / 'FAILED name[: why]' lines from "
                                         "checks run outside Bazel (.ci/run's), counted too")
    parser.add_argument("--expect-checks", default="",
                        help="comma-separated check names that must appear in --checks")
    args = parser.parse_args(argv)
    totals, rows, errors = [0, 0, 0], [], []
    for path in args.bep_files:
        # Each file is one invocation (one configuration), named for the file: cpu.json -> cpu.
        config = os.path.splitext(os.path.basename(path))[0]
        invocation = summarise(path)
        rows += [("%s [%s]" % (label, config), t) for label, t in invocation.test_targets().items()]
        errors += [("%s [%s]" % (label, config), why) for label, why in invocation.errors]
    for label, target in sorted(rows):
        counts = target.counts()
        totals = [t + c for t, c in zip(totals, counts)]
        state = target.state()
        if state == "PASSED" and any(cached for _, _, cached in target.results.values()):
            state += " (cached)"
        print("%-14s %-60s %d passed, %d failed, %d skipped" % ((state, label) + counts))
    for label, why in errors:
        totals[1] += 1
        print("%-14s %s: %s" % ("FAILED", label, why))
    cached = report_cache(rows) if args.require_cached else True
    expected = [name for name in args.expect_checks.split(",") if name]
    for state, name, why in read_checks(args.checks, expected) if (args.checks or expected) else []:
        totals[1 if state == "FAILED" else 0] += 1
        print("%-14s check %s%s" % (state, name, " (%s)" % why if why else ""))
    print("%d passed, %d failed, %d skipped" % tuple(totals))
    return 1 if totals[1] or not cached else 0


if __name__ == "__main__":
    sys.exit(main())
