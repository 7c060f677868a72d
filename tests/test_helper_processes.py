"""A helper process that dies says why: the chaos suite's store-contention workers once died with an
empty stdout, and `json.loads("")` was all anyone saw (issue 40).
"""

import subprocess
import sys

import pytest

from pivotal.testing.cli import HelperFailed, json_output


def python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_a_helper_that_dies_is_reported_with_its_exit_code_and_stderr():
    died = "import sys; sys.stderr.write('Traceback ...\\nOSError: the worker could not open its model'); sys.exit(3)"
    done = python(died)
    with pytest.raises(HelperFailed) as failed:
        json_output(done)
    message = str(failed.value)
    assert "exited 3 and printed nothing" in message
    assert "OSError: the worker could not open its model" in message


def test_a_helper_that_exits_0_without_json_is_reported_with_its_stderr():
    done = python("import sys; print('not json'); sys.stderr.write('warning: the store was read-only')")
    with pytest.raises(HelperFailed, match="exited 0 and printed 9 characters, not JSON") as failed:
        json_output(done)
    assert "warning: the store was read-only" in str(failed.value)


def test_a_helper_json_is_read_whole_or_from_its_last_line():
    assert json_output(python("import json; print(json.dumps({'a': [1, 2]}, indent=2))")) == {"a": [1, 2]}
    assert json_output(python("print('starting'); print('{\"status\": \"success\"}')")) == {"status": "success"}
