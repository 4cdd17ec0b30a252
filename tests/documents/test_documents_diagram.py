"""The statechart drawn as SVG: every state and transition, escaped text, bounded size."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET

from durableflow.documents import compile_document
from durableflow.documents.diagram import MAX_DRAWN, edges, render
from tests import document_corpus as corpus

SVG = "{http://www.w3.org/2000/svg}"


def compiled(document=None):
    return compile_document(document or corpus.valid(), has_task=corpus.has_task)


def test_every_state_and_transition_is_drawn():
    form = compiled()
    root = ET.fromstring(render(form))
    drawn = [g.get("data-path") for g in root.iter(f"{SVG}g") if g.get("class", "").startswith("state ")]
    assert drawn == [state["path"] for state in form["states"]]
    transitions = [g for g in root.iter(f"{SVG}g") if g.get("class") == "transition"]
    assert len(transitions) == len(edges(form)) == 10
    labels = {t.find(f"{SVG}text").text for t in transitions}
    assert {"then", "catch", "otherwise", "approved", "after 1 d", "enter", "exit", "data.total > `100`"} <= labels


def test_document_text_is_escaped():
    document = corpus.valid()
    document["states"]["check"]["choose"][0]["guard"] = "data.x < `1` && '<script>'"
    document["states"]["<b>&"] = document["states"].pop("done")
    document["states"]["pack"]["then"] = "<b>&"
    svg = render(compiled(document))
    ET.fromstring(svg)  # well-formed
    assert "<script>" not in svg and "<b>" not in svg


def test_a_run_s_state_is_highlighted():
    svg = render(compiled(), highlight="approve")
    assert 'stroke="#d6336c"' in svg


def test_a_huge_document_is_not_drawn_but_said_so_at_once():
    form = compiled(corpus.chain(10_000))
    started = time.process_time()
    svg = render(form)
    assert time.process_time() - started < 0.05
    assert f"at most {MAX_DRAWN}" in svg


def test_the_largest_drawn_document_is_laid_out_quickly():
    form = compiled(corpus.chain(MAX_DRAWN - 1))
    started = time.process_time()
    ET.fromstring(render(form))
    assert time.process_time() - started < 0.5
