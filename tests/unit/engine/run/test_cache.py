"""The prefix-cache policy: each adapter's flush and cache counters, a rep's cache figures, and the
run loop keeping, flushing, and voiding a rep whose flush failed.

The adapters' answers are read from what each server's source says it sends (docs/servers-cache.md
names the files and versions); the HTTP exchange is an httpx MockTransport standing in for the
server. The run-loop tests use the FAKE llama-server of tests/component/fakes.py; the real server is
tests/integration/test_cache.py.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from engine.method import stats
from engine.servers import get_adapter
from engine.servers.client import FlushFailed
from engine.servers.prometheus import summed_samples

pytestmark = pytest.mark.timeout(60)


def answering(status: int, body: str) -> tuple[httpx.Client, list[httpx.Request]]:
    """A client whose server answers every request with ``status`` and ``body``; the requests sent."""
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(status, text=body)
    return httpx.Client(base_url="http://server", transport=httpx.MockTransport(handle)), sent


# -- vLLM: POST /reset_prefix_cache, its body's success --------------------------------------


def test_vllm_flush_reads_the_body_not_only_the_status() -> None:
    client, sent = answering(200, '{"success":true}')
    assert get_adapter("vllm").flush_cache(client) == 'POST /reset_prefix_cache: HTTP 200 {"success": true}'
    assert [(r.method, r.url.path) for r in sent] == [("POST", "/reset_prefix_cache")]
    client, _ = answering(200, '{"success":false}')
    with pytest.raises(FlushFailed, match=r'HTTP 200 \{"success": false\}: vLLM did not reset'):
        get_adapter("vllm").flush_cache(client)


def test_vllm_flush_older_empty_200_is_unconfirmed_and_404_names_dev_mode() -> None:
    client, _ = answering(200, "")
    assert "does not confirm the reset" in get_adapter("vllm").flush_cache(client)
    client, _ = answering(404, '{"detail":"Not Found"}')
    with pytest.raises(FlushFailed, match="VLLM_SERVER_DEV_MODE=1"):
        get_adapter("vllm").flush_cache(client)
    client, _ = answering(200, "<html>proxy</html>")
    with pytest.raises(FlushFailed, match="not the"):
        get_adapter("vllm").flush_cache(client)


# -- SGLang: POST /flush_cache, 200 or 400 ---------------------------------------------------


def test_sglang_flush_is_its_status() -> None:
    text = ("Cache flushed.\nPlease check backend logs for more details. (When there are running "
            "or waiting requests, the operation will not be performed.)\n")
    client, sent = answering(200, text)
    assert get_adapter("sglang").flush_cache(client) == "POST /flush_cache: HTTP 200"
    assert [(r.method, r.url.path) for r in sent] == [("POST", "/flush_cache")]
    client, _ = answering(400, text)
    with pytest.raises(FlushFailed, match="HTTP 400: SGLang did not flush"):
        get_adapter("sglang").flush_cache(client)
    client, _ = answering(500, "boom")
    with pytest.raises(FlushFailed, match="HTTP 500: boom"):
        get_adapter("sglang").flush_cache(client)


def test_a_flush_that_cannot_connect_fails_with_the_reason() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)
    client = httpx.Client(base_url="http://server", transport=httpx.MockTransport(refuse))
    with pytest.raises(FlushFailed, match="POST /flush_cache: ConnectError: connection refused"):
        get_adapter("sglang").flush_cache(client)


# -- llama.cpp: no endpoint; cache_prompt false on every request -------------------------------


def test_llamacpp_flush_sends_nothing_and_turns_cache_prompt_off() -> None:
    client, sent = answering(500, "must not be called")
    adapter = get_adapter("llamacpp")
    assert "cache_prompt: false" in adapter.flush_cache(client)
    assert sent == []
    assert adapter.cache_fields("flush") == {"cache_prompt": False}
    assert adapter.cache_fields("keep") == {}
    assert get_adapter("vllm").cache_fields("flush") == get_adapter("sglang").cache_fields("flush") == {}


# -- the counters each server exports -------------------------------------------------------


@pytest.mark.parametrize(("server", "text", "want"), [
    ("llamacpp", "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 30\n"
                 "# TYPE llamacpp:prompt_tokens_cached_total counter\n"
                 "llamacpp:prompt_tokens_cached_total 70\n",
     {"prompt": 100.0, "cached": 70.0}),  # llama.cpp counts computed tokens without the cached ones
    ("vllm", '# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total{engine="0"} 80\n'
             'vllm:prefix_cache_queries_total{engine="1"} 20\n'
             '# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total{engine="0"} 64\n',
     {"prompt": 100.0, "cached": 64.0}),
    # vllm#57727: a connector's tier serves what a reset left there; its hits are cache hits too.
    ("vllm", "vllm:prefix_cache_queries_total 100\nvllm:prefix_cache_hits_total 0\n"
             "vllm:external_prefix_cache_hits_total 90\n", {"prompt": 100.0, "cached": 90.0}),
    ("sglang", '# TYPE sglang:prompt_tokens counter\nsglang:prompt_tokens_total{model_name="m"} 100\n'
               '# TYPE sglang:cached_tokens counter\nsglang:cached_tokens_total{model_name="m"} 96\n',
     {"prompt": 100.0, "cached": 96.0}),
    ("sglang", '# TYPE sglang:prompt_tokens counter\nsglang:prompt_tokens_total{model_name="m"} 100\n', None),
])
def test_cache_counters(server: str, text: str, want: dict[str, float] | None) -> None:
    assert get_adapter(server).cache_counters(summed_samples(text)) == want


# -- a rep's figures --------------------------------------------------------------------------


def req(prompt: int, cached: int | None, error: str | None = None) -> dict[str, Any]:
    return {"start": 0.0, "first_token": 0.1, "end": 1.0, "completion_tokens": 10, "chunks": 10,
            "prompt_tokens": prompt, "cached_tokens": cached, "error": error}


def test_rep_cache_prefers_the_servers_counters_then_the_requests() -> None:
    header = {"cache": {"policy": "keep", "metrics": {"prompt": 200.0, "cached": 150.0}}}
    assert stats.rep_cache(header, [req(20, 0)]) == {"prompt": 200.0, "cached": 150.0, "hit": 0.75,
                                                     "source": "metrics"}
    per = stats.rep_cache({"cache": {"policy": "keep", "metrics": None}}, [req(20, 19), req(20, 0)])
    assert per == {"prompt": 40, "cached": 19, "hit": 0.475, "source": "per-request"}
    # A request that does not say is no figure: half a rep's requests is not the rep.
    assert stats.rep_cache({}, [req(20, 19), req(20, None)])["hit"] is None


def test_a_void_rep_voids_the_row_with_its_reason_and_counts_in_no_figure() -> None:
    ok = ({"rep": 1, "cache": {"policy": "flush", "metrics": {"prompt": 10.0, "cached": 0.0}}},
          [req(10, 0)])
    void: tuple[dict[str, Any], list[dict[str, Any]]] = (
        {"rep": 2, "cache": {"policy": "flush", "flush_failed": "HTTP 200 {success: false}"},
         "void": "cache flush failed: HTTP 200 {success: false}"}, [])
    row = stats.row_figures([ok, void], 1, stats.LeakPolicy())
    assert row["status"] == "void"
    assert row["void_reps"] == "rep 2: cache flush failed: HTTP 200 {success: false}"
    assert row["reps"] == 1 and row["rep_tok_s"] == [10.0]
    assert (row["cache"], row["cache_hit"], row["cache_source"]) == ("flush", 0.0, "metrics")


# -- the run loop ---------------------------------------------------------------------------










