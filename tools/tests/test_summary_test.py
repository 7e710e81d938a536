"""tools/test_summary.py: CI's `N passed, N failed` line counts every case and every failure."""

import json
import os
import sys

import pytest


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


def completed(label, success=True, test=True):
    """A target's completion; a test that is to run lists its summary among the children."""
    event = {"id": {"targetCompleted": {"label": label}}, "completed": {"success": True} if success else {}}
    if test:
        event["children"] = [{"testSummary": {"label": label}}]
    return event


def aborted(label, reason, description=""):
    """As Bazel 4.2 tells an analysis error (a pattern's loading error names the pattern instead)."""
    ident = {"pattern": {"pattern": [label]}} if label.endswith("...") else {"configuredLabel": {"label": label}}
    return {"id": ident, "aborted": {"reason": reason, "description": description}}


def finished(code):
    # Proto3 JSON leaves out zero values: a successful build's exit code has no "code".
    return {"id": {"buildFinished": {}}, "finished": {"exitCode": {"code": code} if code else {"name": "SUCCESS"}}}


def write_bep(path, events, exit_code=0):
    """An event file; exit_code None leaves out the buildFinished event (an unfinished invocation)."""
    if exit_code is not None:
        events = events + [finished(exit_code)]
    path.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    return str(path)


def ok_test(tmp_path, label="//a:ok"):
    return [configured(label), result(label, "PASSED", junit(tmp_path, label[-2:], passed=2)),
            summary(label, "PASSED"), completed(label)]


def last_lines(capsys, n=2):
    return capsys.readouterr().out.splitlines()[-n:]


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
    ], exit_code=3)
    assert test_summary.main([bep]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "7 passed, 3 failed, 2 skipped"
    assert any(line.startswith("PASSED (cached) //a:ok [cpu]") for line in lines)
    assert not any("//a:lib" in line for line in lines)


def test_configs_are_counted_apart_and_checks_are_added(tmp_path, capsys):
    cpu = write_bep(tmp_path / "cpu.json", [configured("//t:cu"), skipped("//t:cu")] + ok_test(tmp_path))
    cuda = write_bep(tmp_path / "cuda.json", [
        configured("//t:cu"), result("//t:cu", "PASSED"), summary("//t:cu", "PASSED")])
    checks = tmp_path / "checks.txt"
    checks.write_text("PASSED cache_check\nFAILED remote_check\n")
    assert test_summary.main([cpu, cuda, "--checks", str(checks)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "SKIPPED" in next(line for line in out if "//t:cu [cpu]" in line)
    assert "1 passed" in next(line for line in out if "[cuda]" in line)
    assert out[-1] == "4 passed, 1 failed, 1 skipped"


def test_a_failed_check_says_why_and_counts_as_run(tmp_path, capsys):
    checks = tmp_path / "checks.txt"
    checks.write_text("FAILED remote_exec: rbe check: FAILED: run 1 failed (exit 3): TIMEOUT: //a:t\n")
    bep = write_bep(tmp_path / "cpu.json", ok_test(tmp_path))
    assert test_summary.main([bep, "--checks", str(checks), "--expect-checks", "remote_exec"]) == 1
    out = last_lines(capsys, 2)
    assert out == ["FAILED         check remote_exec (rbe check: FAILED: run 1 failed (exit 3): TIMEOUT: //a:t)",
                   "2 passed, 1 failed, 0 skipped"]


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


# Each way CI could end green on a failure (the house issue's list), as a hand-made event file.
def test_an_analysis_error_beside_a_passing_test_fails(tmp_path, capsys):
    bep = write_bep(tmp_path / "cpu.json", ok_test(tmp_path) + [
        aborted("//a:bad", "ANALYSIS_FAILURE", "no such attribute 'srcz' in 'py_test' rule")], exit_code=1)
    assert test_summary.main([bep]) == 1
    out = last_lines(capsys, 3)
    assert "FAILED         //a:bad [cpu]: ANALYSIS_FAILURE: no such attribute 'srcz'" in out[0]
    assert out[1] == "FAILED         (invocation) [cpu]: bazel exited with code 1"
    assert out[2] == "2 passed, 2 failed, 0 skipped"


def test_a_pattern_that_does_not_load_fails(tmp_path, capsys):
    bep = write_bep(tmp_path / "cpu.json", ok_test(tmp_path) + [
        aborted("//nope/...", "LOADING_FAILURE", "no targets found beneath 'nope'")], exit_code=1)
    assert test_summary.main([bep]) == 1
    assert "FAILED         (pattern //nope/...) [cpu]: LOADING_FAILURE: no targets found" in capsys.readouterr().out


def test_a_failing_non_test_target_fails(tmp_path, capsys):
    bep = write_bep(tmp_path / "cpu.json", ok_test(tmp_path) + [
        configured("//a:lib", test=False), completed("//a:lib", success=False, test=False)], exit_code=1)
    assert test_summary.main([bep]) == 1
    assert "FAILED         //a:lib [cpu]: failed to build" in last_lines(capsys, 3)


def test_a_test_with_no_result_fails_and_a_filtered_one_is_not_counted(tmp_path, capsys):
    bep = write_bep(tmp_path / "cpu.json", ok_test(tmp_path) + [
        configured("//a:lost"), completed("//a:lost"),
        configured("//a:slow"), completed("//a:slow", test=False)])  # left out by --test_tag_filters
    assert test_summary.main([bep]) == 1
    out = capsys.readouterr().out
    assert "NO RESULT      //a:lost [cpu]" in out
    assert any(line.startswith("NOT RUN        //a:slow [cpu]") and "0 passed, 0 failed" in line
               for line in out.splitlines())
    assert out.splitlines()[-1] == "2 passed, 1 failed, 0 skipped"


def test_flaky_is_reported_as_flaky_and_fails(tmp_path, capsys):
    bep = write_bep(tmp_path / "cpu.json", [
        configured("//a:flaky"), result("//a:flaky", "PASSED", junit(tmp_path, "fl", passed=4)),
        summary("//a:flaky", "FLAKY"), completed("//a:flaky")])
    assert test_summary.main([bep]) == 1
    out = last_lines(capsys)
    assert out[0].startswith("FLAKY          //a:flaky [cpu]") and out[1] == "4 passed, 1 failed, 0 skipped"


@pytest.mark.parametrize("content", ["", None, "{not json\n"], ids=["empty", "missing", "garbled"])
def test_an_empty_missing_or_garbled_event_file_fails(tmp_path, capsys, content):
    path = tmp_path / "cpu.json"
    if content is not None:
        path.write_text(content)
    assert test_summary.main([str(path)]) == 1
    assert last_lines(capsys, 1) == ["0 passed, %d failed, 0 skipped" % (2 if content == "" else 3)]


def test_an_unfinished_invocation_and_no_tests_found_fail(tmp_path, capsys):
    unfinished = write_bep(tmp_path / "cpu.json", ok_test(tmp_path), exit_code=None)
    assert test_summary.main([unfinished]) == 1
    assert "ends before the build finished" in capsys.readouterr().out
    no_tests = write_bep(tmp_path / "cuda.json", [], exit_code=4)  # NO_TESTS_FOUND
    assert test_summary.main([no_tests]) == 1
    out = capsys.readouterr().out
    assert "bazel exited with code 4" in out and "no test target was configured" in out


def test_tests_passing_while_bazel_failed_fail(tmp_path, capsys):
    assert test_summary.main([write_bep(tmp_path / "cpu.json", ok_test(tmp_path), exit_code=1)]) == 1
    assert last_lines(capsys)[-1] == "2 passed, 1 failed, 0 skipped"


def test_an_expected_check_that_never_ran_fails(tmp_path, capsys):
    checks = tmp_path / "checks.txt"
    checks.write_text("PASSED reproducible_builds\n")
    bep = write_bep(tmp_path / "cpu.json", ok_test(tmp_path))
    argv = [bep, "--checks", str(checks), "--expect-checks", "reproducible_builds,remote_cache"]
    assert test_summary.main(argv) == 1
    out = last_lines(capsys, 3)
    assert out[:2] == ["PASSED         check reproducible_builds",
                       "FAILED         check remote_cache (expected, never ran)"]
    assert out[2] == "3 passed, 1 failed, 0 skipped"
    checks.write_text("PASSED reproducible_builds\nPASSED remote_cache\n")
    assert test_summary.main(argv) == 0
