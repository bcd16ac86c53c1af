from rag.nodes.planner import Planner
from tests.rag.nodes.support import drain, make_state, make_writer


async def test_writes_the_plan_and_announces_it():
    state = make_state(normalized_question="請問時數補登申請表在哪裡下載", language="zh-hant")
    writer, channel = make_writer()
    assert await Planner().run(state, writer) == "retrieve"
    assert (state.intent, state.should_retrieve, state.plan_source) == ("form_download", True, "rules")
    [event] = await drain(channel)
    assert (event["channel"], event["stage"], event["intent"], event["should_retrieve"]) == (
        "status",
        "plan",
        "form_download",
        True,
    )


async def test_follow_up_route():
    state = make_state(normalized_question="簡短一點", previous_answer="重設密碼的步驟如下。")
    assert await Planner().run(state, make_writer()[0]) == "followup"
    assert (state.intent, state.followup_instruction, state.should_retrieve) == (
        "conversation_followup",
        "shorten",
        False,
    )


async def test_out_of_scope_goes_direct():
    state = make_state(normalized_question="Tell me a joke", language="en")
    assert await Planner().run(state, make_writer()[0]) == "direct"
    assert (state.intent, state.should_retrieve) == ("out_of_scope", False)
