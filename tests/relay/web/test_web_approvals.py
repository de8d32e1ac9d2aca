"""The page under the host's approval policy: what an asked request needs, each approval as it
comes, and the rule or the people a decision was made by."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from .fake_relay import Scenario, fake_relay, wire_item

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

OPTIONS = [
    {"option_id": "allow", "name": "Allow once", "kind": "allow_once"},
    {"option_id": "reject", "name": "Reject", "kind": "reject_once"},
]


def request(seq: int, request_id: str, **data: Any) -> dict[str, Any]:
    return wire_item(
        seq,
        "permission_request",
        {
            "request_id": request_id,
            "title": "make deploy",
            "tool_call_id": None,
            "options": OPTIONS,
            **data,
        },
        status="action_required",
    )


def test_a_two_person_request_shows_who_approved_and_the_policys_own_answers(page: Page) -> None:
    items = [
        wire_item(0, "message", {"role": "user", "text": "deploy"}, created_by="alice"),
        request(
            1,
            "p1",
            approval={
                "answer": ["alice", "bob"],
                "approvals": 2,
                "approved_by": [],
                "remember": "once",
                "rule": {"index": 3, "line": 10, "rule": 'verdict = "ask", approvals = 2'},
            },
        ),
        request(2, "p2"),
        wire_item(
            3,
            "permission_decision",
            {
                "request_id": "p2",
                "option_id": "reject",
                "option_name": "Reject",
                "option_kind": "reject_once",
                "outcome": "selected",
                "policy": {
                    "source": "team.toml",
                    "index": 2,
                    "line": 6,
                    "rule": 'verdict = "deny"',
                },
            },
            created_by="policy",
        ),
    ]
    with fake_relay(Scenario(items=items)) as relay:
        page.goto(relay.page_url("drive"))
        asked = page.locator("[data-testid=permission-request][data-request-id=p1]")
        needs = asked.get_by_test_id("permission-approval")
        expect(needs).to_have_text("Needs 2 approvals (from alice or bob)")
        expect(needs).to_have_attribute("title", 'rule 3: verdict = "ask", approvals = 2')
        denied = page.locator("[data-testid=permission-request][data-request-id=p2]")
        expect(denied).to_have_attribute("data-state", "answered")
        expect(denied.get_by_test_id("permission-outcome")).to_contain_text(
            'The approval policy answered: Reject (rule 2 of team.toml:6: verdict = "deny")'
        )

        relay.push(
            wire_item(
                4,
                "permission_approval",
                {"request_id": "p1", "option_id": "allow", "approved_by": ["alice"], "needed": 1},
                created_by="alice",
            )
        )
        expect(needs).to_have_text("Needs 2 approvals (from alice or bob): alice approved")
        expect(asked).to_have_attribute("data-state", "pending")
        expect(asked.locator("button[data-option-id=allow]")).to_be_enabled()
        relay.push(
            wire_item(
                5,
                "permission_decision",
                {
                    "request_id": "p1",
                    "option_id": "allow",
                    "option_name": "Allow once",
                    "option_kind": "allow_once",
                    "outcome": "selected",
                    "approved_by": ["alice", "bob"],
                },
                created_by="bob",
            )
        )
        expect(asked).to_have_attribute("data-state", "answered")
        expect(asked.get_by_test_id("permission-outcome")).to_contain_text(
            "alice, bob approved: Allow once"
        )
        assert relay.errors == []
