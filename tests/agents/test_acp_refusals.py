"""Known refusals of ACP agents, turned into lines a teammate can act on."""

from __future__ import annotations

from tunnel.agents.acp_refusals import readable


def test_gemini_refusing_in_an_untrusted_folder_says_how_to_trust_it() -> None:
    # As Gemini CLI 0.61 answers session/set_mode, and as it fails a tool call.
    error = (
        'Internal error (code -32603): {"details": "Cannot enable privileged approval modes '
        'in an untrusted folder."}'
    )
    for text in (error, "Cannot enable privileged approval modes in an untrusted folder."):
        line = readable(text)
        assert line is not None
        assert line.startswith("it does not trust this folder")
        assert "GEMINI_CLI_TRUST_WORKSPACE=true" in line
        assert "\n" not in line


def test_gemini_that_lost_a_session_says_why_and_how_to_keep_it() -> None:
    error = (
        'Internal error (code -32603): {"details": "No previous sessions found for this project."}'
    )
    line = readable(error)
    assert line is not None
    assert line.startswith("it no longer has that session")
    assert "general.sessionRetention.enabled false" in line


def test_any_other_error_is_left_as_the_agent_said_it() -> None:
    assert readable("Internal error (code -32603)") is None
    assert readable("") is None
