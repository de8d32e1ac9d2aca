"""Claude Code (claude-agent-acp, which offers the unstable session/fork) in a forked conversation:
its agent forks the source's session and remembers what was said before the fork point."""

from __future__ import annotations

import json

import pytest

from tests.host.teammate import attached
from tests.support import eventually
from tunnel.app.requests import Fork, Prompt

from .conftest import CLAUDE, StartSession, agent_said, agent_starts
from .model_server import ModelServer, Text, reply

pytestmark = [pytest.mark.anyio, pytest.mark.agents_real, pytest.mark.timeout(120)]


async def test_a_forks_claude_forks_the_sources_session_and_remembers_it(
    share: StartSession, model: ModelServer
) -> None:
    model.script("REMEMBER-F", reply(Text("Noted.")))
    model.script("RECALL-F", reply(Text("It is swordfish.")))
    async with share(CLAUDE) as session, session.teammate("alice", drive=True) as alice:
        await alice.send(Prompt(text="REMEMBER-F: the password is swordfish"))
        await alice.wait_for(agent_said("Noted."))
        (first,) = agent_starts(alice)
        assert alice.ready is not None
        source = alice.ready["conversation_id"]
        # Claude Code saves its transcript a moment after the turn; its fork copies that file.
        transcript = f"{first['session_id']}.jsonl"
        projects = session.home / ".claude" / "projects"
        assert await eventually(
            lambda: any("Noted." in p.read_text() for p in projects.rglob(transcript)),
            attempts=100,
        )
        upto = max(alice.seqs())
        await alice.send(Fork(conversation=source, upto=upto))
        await alice.wait_for(lambda t: t.started, within=60)
        fork = alice.started[0]

        async with attached(session.host.drive_link, "bob", conversation=fork, after=-1) as bob:
            await bob.wait_for(lambda t: len(agent_starts(t)) == 2, within=60)
            started = agent_starts(bob)[1]
            assert started["forked"] == "session_fork"
            assert started["forked_session"] == first["session_id"]
            assert started["session_id"] != first["session_id"]
            await bob.send(Prompt(text="RECALL-F: what is the password?"))
            await bob.wait_for(agent_said("It is swordfish."), within=60)
        # The fork's agent sent the model the turn before the fork point: it remembers.
        recall = model.calls("RECALL-F")[-1]
        assert "the password is swordfish" in json.dumps(recall.body["messages"])
