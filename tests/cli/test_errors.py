"""The shared error layer of `ferry`: one prefix per message, every stream through the injected Environment."""

from ferryrun import ferry

from torchferry.status import ExitStatus


def test_scan_errors_are_prefixed_once(tmp_path):
    code, _, err = ferry("scan", str(tmp_path / "missing.py"))
    assert code == ExitStatus.USAGE
    assert err.strip().startswith("ferry scan: ") and "ferry: ferry scan" not in err and "ferry scan: ferry scan" not in err


def test_usage_help_and_version_go_to_the_environment(capsys):
    code, out, err = ferry("check", "--steps", "many")
    assert code == ExitStatus.USAGE and "invalid int value: 'many'" in err
    code, out, _ = ferry("--version")
    assert code == 0 and out.startswith("torchferry ")
    code, out, _ = ferry()
    assert code == ExitStatus.USAGE and "COMMAND" in out
    assert capsys.readouterr() == ("", "")  # nothing bypassed the injected streams
