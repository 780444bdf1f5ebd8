"""An adapter folder with a broken file says which file and why, in one line."""

from __future__ import annotations

import pytest
from tiny import run_cli


@pytest.mark.parametrize("record", [True, False], ids=["with-setllm-json", "peft-only"])
@pytest.mark.parametrize("text, problem", [("{not json", "is not valid JSON (Expecting property name"), ("[1, 2]", "is not a JSON object")])
def test_an_adapter_config_that_is_not_json_is_named(model_dir, capsys, tmp_path, text, problem, record):
    import json

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    if record:  # setllm.json names the base: the base check passes, and PEFT used to meet the file first
        (adapter / "setllm.json").write_text(json.dumps({"base_model": model_dir, "variant": "setmask-setpe"}))
    (adapter / "adapter_config.json").write_text(text)
    (adapter / "adapter_model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    code, _, err = run_cli(capsys, "choose", "Q?", "--options", "a", "b", "--model", model_dir, "--adapter", str(adapter))
    lines = [line for line in err.strip().splitlines() if not line.startswith("warning:")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: adapter {str(adapter)!r}: adapter_config.json {problem}")
    assert "does not fit" not in err
