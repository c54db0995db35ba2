"""A turn's dependency graph, rebuilt from its spans: the critical path of its silence and of the
whole turn, and the same graph re-timed (what-if: ``pipeline.analysis.retiming``).

Every moment a turn's spans record (the end-point, the transcript, each call's first token, each
sentence's cut, each TTS first frame, each sentence's audio starting to play) is a ``Point``:
work of one ``kind`` (a segment: ASR, an LLM call's first token, TTS to its first frame...) that
began once every point it waits on was done, plus the hand-off between them. Measured, a point's
start is when its span says the work began; each dependency carries the lag from that dependency
to this start, so the graph re-timed without a change gives back every measured time to the
nanosecond. A point waits on what the pipeline makes it wait on: ASR on the end-point; a call on
the transcript, or on the tool round trip before it; a sentence's cut on its call's first token
(or the previous cut); its TTS on the cut and on the previous sentence's TTS (one synthesiser);
its audio on its first frame and on the previous sentence's audio ending (one speaker). A device's
turn over a transport, read with its server's, crosses the wire: its end of speech reaches the server
(uplink), the server's stages run, the first frame is sent, received (downlink) and played (the
device's buffer); its last sample plays once the last frame has come and all before it has played.

The critical path walks back from a target (the first audible sample: the user's silence; or the
last sample played: the whole turn) through the dependency each point actually waited for (the
latest). Its segments sum exactly to the target's time from the end of speech, because they are
that time split at the points it passed. Work off the path (the rest of a generation, later
sentences' TTS) is slack: it ran beside the path and delayed nobody.

Modules, in the order a graph is made and used:

- ``graph``: the graph's types (``Point``, ``Dep``, ``TurnGraph``) and ``PathError``;
- ``build``: a turn's spans -> its graph (``graph_of``), the server's stages point by point, with
  ``builder`` (points added in time order) and ``playback`` (the answer played, in one process or
  over the wire);
- ``critical``: the critical path to a target, and the slack beside it; a turn's two paths as its paths.csv row.

The segment kinds a path is split into (in the order a turn passes them, and what each is) are paths.csv's
vocabulary, so they are declared with its record, ``PathRow``, in ``pipeline.records.path``.
"""
