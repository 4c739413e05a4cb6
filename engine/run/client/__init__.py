"""The load generator's HTTP client: one streamed chat request on a raw HTTP/1.1 connection, with
the least work per network read.

- :mod:`.transport`: connections and clients, the hot path (an arrival time and the bytes per
  read) and the bulk parse scheduled in turns on the loop;
- :mod:`.http`: the request, and the response's HTTP/1.1 framing by llhttp;
- :mod:`.sse`: the body's server-sent events, each stamped with the arrival time of the read
  that completed it, so a timestamp is when the bytes arrived, not when the parser reached them;
- :mod:`.record`: the events' JSON into the request's record (engine.record.request).

Why not aiohttp: its StreamReader runs Python code for every HTTP chunk (feed, wake the reader,
slice), and servers send one chunk per token; that alone cost more per chunk than the whole of this
client (bench/client_bench.py). uvloop calls :meth:`.transport.Connection.data_received` from C
once per read, however many chunks the read holds.
"""
