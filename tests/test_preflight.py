"""Preflight checks everything a run will need before its first action: with memory on and the
embedding model's wheel missing, the run stops in one line before any tool runs, through the
runner and through the graph's own first node (a direct `ainvoke`). Counted from the world's side.
"""

import json

import pytest
from langchain_core.tools import tool

from pivotal import Context, arun, create_pivotal_agent
from pivotal.core.errors import PivotalError
from pivotal.memory.storage import embeddings


@pytest.fixture
def ledger(tmp_path):
    return tmp_path / "ledger.jsonl"


@pytest.fixture
def desk(ledger, tmp_path):
    @tool
    def refund(order_id: str, amount: float) -> str:
        """Refund an amount of an order to the customer's card. Cannot be undone."""
        with ledger.open("a") as out:
            out.write(json.dumps({"kind": "refund", "order_id": order_id}) + "\n")
        return f"refunded {amount} of {order_id}"

    return create_pivotal_agent("sim", [refund], max_steps=2, max_pivot_retries=0, memory=True,
                                store_path=str(tmp_path / "lessons"), name="preflight-desk")  # fmt: skip


@pytest.fixture
def no_embedding_wheel(monkeypatch):
    monkeypatch.setattr(embeddings, "MODEL_PACKAGE", "no_such_minilm_wheel")


def refunds(ledger) -> int:
    return len(ledger.read_text().splitlines()) if ledger.exists() else 0


async def test_a_direct_invoke_stops_before_the_first_action_without_the_embedding_model(
    desk, ledger, no_embedding_wheel
):
    with pytest.raises(PivotalError) as refused:
        await desk.ainvoke({"messages": [("user", "refund order A1")]})
    assert "embedding model cannot load" in str(refused.value) and len(str(refused.value).splitlines()) == 1
    assert refunds(ledger) == 0


async def test_the_runner_stops_before_the_first_action_without_the_embedding_model(
    desk, ledger, tmp_path, no_embedding_wheel
):
    context = Context(model="sim", memory=True, store_path=str(tmp_path / "lessons"), default_env="preflight-desk")
    with pytest.raises(PivotalError, match="embedding model cannot load"):
        await arun("refund order A1", context, checkpoint_path=":memory:")
    assert refunds(ledger) == 0
