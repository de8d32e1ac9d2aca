"""The agent's questions in the page, against the real stack (`tunnel relay`, `tunnel host` and
tests/agents/fake_acp_agent.py): a form card built from the question's fields, answered by a
driver; a viewer sees it read-only, and a driver's hand-made answer that does not fit is refused
by the host."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from .stack import scripted_stack
from .test_web_stack import FAKE_ACP_AGENT, connected, named, prompt

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]


def test_a_driver_answers_the_agents_form_and_a_viewer_sees_it_read_only(
    browser: Browser, tmp_path: Path
) -> None:
    with scripted_stack(browser, tmp_path, FAKE_ACP_AGENT) as (host, new_page):
        alice = new_page()
        alice.goto(named(host.drive_link, "alice"))
        connected(alice)
        victor = new_page()
        victor.goto(named(host.view_link, "victor"))
        connected(victor)

        prompt(alice, "elicit")
        card = alice.locator("[data-testid=question][data-state=pending]")
        expect(card).to_be_visible(timeout=30_000)
        expect(card.get_by_test_id("question-message")).to_have_text("Pick")
        expect(alice.get_by_test_id("agent-status")).to_have_text("waiting for an answer")
        fields = card.get_by_test_id("question-field")
        expect(fields).to_have_count(4)
        assert fields.evaluate_all("fs => fs.map(f => f.dataset.field)") == [
            "name",
            "color",
            "count",
            "urgent",
        ]
        # The viewer: the same form, nothing to type in or send.
        seen = victor.locator("[data-testid=question][data-state=pending]")
        expect(seen).to_be_visible(timeout=30_000)
        expect(seen.get_by_test_id("question-accept")).to_have_count(0)
        expect(seen.get_by_test_id("question-input").first).to_be_disabled()
        expect(seen.get_by_test_id("question-outcome")).to_have_text(
            "Waiting for a driver to answer."
        )

        request_id = card.get_attribute("data-request-id")
        # A viewer's hand-made answer: refused, whatever it says.
        victor.evaluate(
            "id => window.__tunnel.session.link.send({op: 'elicitation', request_id: id,"
            " action: 'decline', content: null})",
            request_id,
        )
        expect(victor.get_by_test_id("op-error")).to_have_attribute("data-code", "forbidden")
        # A hand-made answer with a field the form does not have: refused, the question stays.
        alice.evaluate(
            "id => window.__tunnel.session.link.send({op: 'elicitation', request_id: id,"
            " action: 'accept', content: {name: 'x', color: 'r', admin: true}})",
            request_id,
        )
        toast = alice.get_by_test_id("op-error")
        expect(toast).to_have_attribute("data-code", "bad_request")
        expect(card).to_have_attribute("data-state", "pending")

        card.locator("[data-field=name] input").fill("Ann <b>Lee</b>")
        card.locator("[data-field=color] select").select_option("g")
        card.locator("[data-field=count] input").fill("4")
        card.get_by_test_id("question-accept").click()
        agent_says = alice.locator("[data-testid=message][data-role=agent]")
        # Typed as the kinds the fields are: an integer, a boolean the checkbox left unticked.
        expect(agent_says).to_contain_text('answered accept {"color": "g", "count": 4')
        expect(agent_says).to_contain_text('"urgent": false}')
        for page in (alice, victor):
            answered = page.locator("[data-testid=question][data-state=answered]")
            expect(answered.get_by_test_id("question-outcome")).to_have_text(
                "alice answered: name: Ann <b>Lee</b>; color: g; count: 4; urgent: false"
            )
            expect(answered.locator("b")).to_have_count(0)  # what alice typed stays text

        # A question withdrawn by the agent closes as cancelled.
        prompt(alice, "elicit-withdraw")
        expect(
            victor.locator("[data-testid=question][data-action=cancel]").get_by_test_id(
                "question-outcome"
            )
        ).to_have_text("Cancelled by agent", timeout=30_000)


def test_the_agents_usage_shows_under_the_settings_and_a_joiner_sees_the_latest(
    browser: Browser, tmp_path: Path
) -> None:
    with scripted_stack(browser, tmp_path, FAKE_ACP_AGENT) as (host, new_page):
        alice = new_page()
        alice.goto(named(host.drive_link, "alice"))
        connected(alice)
        line = alice.get_by_test_id("agent-usage")
        expect(line).to_be_hidden()
        prompt(alice, "usage")
        text = "53k of 200k tokens used (26%), 147k left, cost 0.42 USD"
        expect(line).to_have_text(text, timeout=30_000)
        # State, not news: nothing about it in the conversation.
        expect(alice.locator("[data-what=usage]")).to_have_count(0)
        victor = new_page()
        victor.goto(named(host.view_link, "victor"))
        connected(victor)
        expect(victor.get_by_test_id("agent-usage")).to_have_text(text)
