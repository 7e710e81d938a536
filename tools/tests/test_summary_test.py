"""tools/test_summary.py: CI's `N passed, N failed` line counts every case and every failure."""

import json
import os
import sys


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import test_summary  # noqa: E402

JUNIT = """<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="{n}">{cases}</testsuite></testsuites>"""


def junit(tmp_path, name, passed=0, failed=0, skipped=0):
    cases = ("<testcase name='p'/>" * passed + "<testcase name='f'><failure/></testcase>" * failed
             + "<testcase name='s'><skipped/></testcase>" * skipped)
    path = tmp_path / (name + ".xml")
    path.write_text(JUNIT.format(n=passed + failed + skipped, cases=cases))
    return path


def configured(label, test=True):
    configured = {"targetKind": "py_test rule"}
    if test:
        configured["testSize"] = "SMALL"
    return {"id": {"targetConfigured": {"label": label}}, "configured": configured}


def result(label, status, xml=None, cached=False):
    outputs = [{"name": "test.xml", "uri": "file://%s" % xml}] if xml else []
    return {"id": {"testResult": {"label": label, "run": 1, "shard": 1, "attempt": 1}},
            "testResult": {"status": status, "testActionOutput": outputs, "cachedLocally": cached}}


def summary(label, status):
    return {"id": {"testSummary": {"label": label}}, "testSummary": {"overallStatus": status}}


def skipped(label):
    return {"id": {"targetCompleted": {"label": label}}, "aborted": {"reason": "SKIPPED"}}


def write_bep(path, events):
    path.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    return str(path)


def test_counts_cases_and_every_kind_of_failure(tmp_path, capsys):
    bep = write_bep(tmp_path / "cpu.json", [
        configured("//a:ok"), result("//a:ok", "PASSED", junit(tmp_path, "ok", passed=3, skipped=1), cached=True),
        summary("//a:ok", "PASSED"),
        configured("//a:bad"), result("//a:bad", "FAILED", junit(tmp_path, "bad", passed=2, failed=1)),
        summary("//a:bad", "FAILED"),
        # A timeout after some cases passed: their XML shows no failure, yet the target failed.
        configured("//a:slow"), result("//a:slow", "TIMEOUT", junit(tmp_path, "slow", passed=2)),
        summary("//a:slow", "TIMEOUT"),
        configured("//a:broken"), summary("//a:broken", "FAILED_TO_BUILD"),
        configured("//a:gpu"), skipped("//a:gpu"),
        # A skipped library is no test and is not counted.
        configured("//a:lib", test=False), skipped("//a:lib"),
    ])
    assert test_summary.main([bep]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "7 passed, 3 failed, 2 skipped"
    assert any(line.startswith("PASSED (cached) //a:ok [cpu]") for line in lines)
    assert not any("//a:lib" in line for line in lines)


def test_configs_are_counted_apart_and_checks_are_added(tmp_path, capsys):
    cpu = write_bep(tmp_path / "cpu.json", [configured("//t:cu"), skipped("//t:cu")])
    cuda = write_bep(tmp_path / "cuda.json", [
        configured("//t:cu"), result("//t:cu", "PASSED"), summary("//t:cu", "PASSED")])
    checks = tmp_path / "checks.txt"
    checks.write_text("PASSED cache_check\nFAILED remote_check\n")
    assert test_summary.main([cpu, cuda, "--checks", str(checks)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "SKIPPED" in next(line for line in out if "[cpu]" in line)
    assert "1 passed" in next(line for line in out if "[cuda]" in line)
    assert out[-1] == "2 passed, 1 failed, 1 skipped"


def test_all_green_exits_zero(tmp_path, capsys):
    bep = write_bep(tmp_path / "cpu.json", [
        configured("//a:ok"), result("//a:ok", "PASSED", junit(tmp_path, "ok", passed=2)),
        summary("//a:ok", "PASSED")])
    assert test_summary.main([bep]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "2 passed, 0 failed, 0 skipped"


def test_require_cached_fails_when_a_test_ran(tmp_path, capsys):
    events = [configured("//a:x"), result("//a:x", "PASSED", cached=True), summary("//a:x", "PASSED"),
              configured("//a:y"), result("//a:y", "PASSED"), summary("//a:y", "PASSED")]
    bep = write_bep(tmp_path / "cpu.json", events)
    assert test_summary.main(["--require-cached", bep]) == 1
    out = capsys.readouterr().out
    assert "NOT CACHED     //a:y [cpu]" in out and "1 of 2 test results from the cache" in out
    # Results that Bazel took from the disk cache count as cached too.
    remote = result("//a:y", "PASSED")
    remote["testResult"]["executionInfo"] = {"cachedRemotely": True}
    bep = write_bep(tmp_path / "cpu.json", events[:3] + [configured("//a:y"), remote])
    assert test_summary.main(["--require-cached", bep]) == 0


def test_require_cached_fails_when_nothing_was_tested(tmp_path):
    assert test_summary.main(["--require-cached", write_bep(tmp_path / "cpu.json", [])]) == 1
