"""Span names, event names and attribute keys: the vocabulary shared by tracing and analysis.

This module imports nothing, so analysis can read traces without the tracing
machinery. LLM calls follow the OpenTelemetry GenAI semantic conventions.
"""

from __future__ import annotations

SCHEMA_VERSION = "1"  # bump when span shapes change; analysis refuses unknown versions
STATUS_ERROR = 2  # OTLP StatusCode.ERROR, as trace files carry it

# span names
SESSION = "session"
TURN = "turn"
VAD = "vad"
ASR = "asr"
LLM_CALL = "llm.call"
TOOL = "tool"
DEVICE_TOOL_CALL = "device.tool_call"  # a tool run on the device (MCP tools/call over its link), round trip
SENTENCE = "sentence"
TTS = "tts"
PLAYBACK = "playback"
DEVICE = "device"  # a device's view of the turn across a real transport
DOWNLINK = "downlink"  # a server's transport sending the answer's audio: first frame out to last
LLM_QUEUE = "llm.queue"  # a call waiting for the shared model's scheduler, by the scheduler's own clock
BACKGROUND_JOB = "background.job"  # work competing with the voice turns for the model (its own trace)

# span event names
EV_USER_SPEECH_END = "user_speech_end"
EV_SPEECH_START = "speech_start"
# a question with a truth: its last speech sample reached the server (a device: its microphone captured it)
EV_TRUE_SPEECH_END = "true_speech_end"
EV_VAD_DECISION = "vad_decision"  # a decision the VAD recorded (pipeline.events.VadDecision), when it passed
EV_FIRST_TOKEN = "first_token"
EV_FIRST_CHUNK = "first_chunk"  # the first streamed chunk of a call, often role-only with no text
EV_TOOL_CALL = "tool_call_complete"  # a call's tool call, arguments complete (its first piece is first_token)
EV_FIRST_FRAME = "first_frame"
EV_SENTENCE_AUDIO = "sentence_audio_start"
# device events (a real transport)
EV_LAST_UPLINK = "last_uplink_frame"
EV_STT = "stt_received"  # the last stt of the turn (its transcript is the turn's)
EV_STT_MESSAGE = "stt_message"  # each stt of the turn, where it received more than one
EV_LLM = "llm_received"
EV_FIRST_AUDIO_RECEIVED = "first_audio_received"
EV_FIRST_AUDIBLE = "first_audible_played"  # the answer's first sample above the audibility threshold
EV_LAST_AUDIBLE = "last_audible_played"  # the end of its last such sample
# a voice bot's own mark, as its wire told it (Pipecat's RTVI: "bot-started-speaking"...), beside what was heard
EV_BOT_MARK = "bot_mark"
BOT_MARK = "lab.bot.mark"  # the mark's kind, as the bot named it
BOT_TEXT = "lab.bot.text"  # the text it carried (a transcription, a TTS text), when it carried one
EV_SENTENCE_START = "sentence_start_received"
EV_TTS_STOP = "tts_stop_received"
EV_ABORT = "abort_sent"  # barge-in
EV_LAST_AUDIO_RECEIVED = "last_audio_received"
EV_DISCONNECTED = "disconnected"  # a device span's: its connection was lost (in the turn or while idle before it)
EV_RECONNECT_FAILED = "reconnect_failed"  # a try to open it again that failed (lab.error_message: why)
EV_RECONNECTED = "reconnected"  # the server answered the new hello

# session / turn attributes
SCHEMA = "lab.schema_version"
RUN_ID = "lab.run_id"
CONDITION = "lab.condition"
CONFIG_ID = "lab.config_id"
CLOCK = "lab.clock"
QUESTION_ID = "lab.question_id"
QUESTION_COUNT = "lab.question_count"  # questions the run asks every round (after --limit)
ROUND = "lab.round"
WARMUP = "lab.warmup"
LANGUAGE = "lab.language"
CATEGORY = "lab.category"
OK = "lab.ok"
ERROR_TYPE = "error.type"
ERROR_MESSAGE = "lab.error_message"
NOTE = "lab.note"
LEFTOVER_WAIT_MS = "lab.leftover_wait_ms"  # the turn's stages' engine work still running when it ended, waited for
TEMP_C = "lab.temp_c"
DEVICE_INDEX = "lab.device.index"  # which of a run's emulated devices asked (0-based)
DEVICE_COUNT = "lab.device.count"
PRIORITY = "lab.llm.priority"  # the scheduler's class for a call: interactive or background
HOST_OTHER_CPU_MS = "lab.host.other_cpu_ms"  # CPU time other processes used during the turn
HOST_LOAD_AVG_1M = "lab.host.load_avg_1m"
# a stage span's CPU, from its start to its first output (pipeline.run.cpu): this process over all its threads
CPU_USER_MS = "lab.cpu.user_ms"
CPU_SYSTEM_MS = "lab.cpu.system_ms"
CPU_VOLUNTARY = "lab.cpu.voluntary_switches"  # the process gave up a core (waited for I/O, a lock, a futex)
CPU_INVOLUNTARY = "lab.cpu.involuntary_switches"  # a core was taken from it (another thread or process ran)
CPU_OTHER_MS = "lab.cpu.other_ms"  # other processes' CPU time meanwhile, the whole machine's
CPU_STEAL_MS = "lab.cpu.steal_ms"  # the hypervisor gave the machine's cores to another guest meanwhile
REFERENCE_TEXT = "lab.reference_text"
EXPECTED_KEYWORDS = "lab.expected_keywords"  # ";"-separated groups of "|"-separated alternatives
LLM_ENDPOINT = "lab.llm.endpoint"  # "in-process llama.cpp", "emulated cloud, profile X; network Y", ...
CONFIG_JSON = "lab.config_json"  # every setting of the run, so a report can say what differs
SERVER_SETTINGS = "lab.server.settings"  # a xiaozhi server's session and door settings (pipeline.serve), name=value
SCRIPTED = "lab.scripted_stages"
IMPL_PREFIX = "lab.impl."  # + role: "lab.impl.llm" = "scripted"

# stage attributes
STAGE_IMPL = "lab.stage.impl"
STAGE_SCRIPTED = "lab.stage.scripted"
SPEECH_START_MS = "lab.vad.speech_start_offset_ms"
SPEECH_END_MS = "lab.vad.speech_end_offset_ms"
# the audio in hand when the VAD declared the end-point (the end of the frame it was declared on, audio time)
DECLARED_AT_MS = "lab.vad.declared_at_ms"
# a question's truth (its truth.csv line), on the turn span: where its user really finished (clip ms), the pauses
# inside it ("start-end;..." ms), and the utterances the run's end-of-turn detector makes of the whole clip
TRUTH_SPEECH_END_MS = "lab.truth.speech_end_ms"
TRUTH_PAUSES = "lab.truth.pauses"
TRUTH_UTTERANCES = "lab.truth.utterances"
# a device span's: the server's recognised-text (stt) messages received in the turn (more than one: the server heard
# the question as several utterances)
STT_MESSAGES = "lab.device.stt_messages"
SETTLE_WAIT_MS = "lab.device.settle_wait_ms"  # before the turn, waited this long for a quiet server (--settle-ms)
# a vad_decision event's: its verdict ("end", "finished", "wait", "max_silence", "end_of_input"), the audio time it
# was made at, an end-of-turn model's probability that the turn is finished, the CPU the deciding thread spent on
# it (a model's inference; a frame VAD's frames, summed) and the frames classified; speech_end_offset_ms as above
DECISION_VERDICT = "lab.vad.decision.verdict"
DECISION_AT_MS = "lab.vad.decision.at_ms"
DECISION_PROBABILITY = "lab.vad.decision.probability"
DECISION_CPU_MS = "lab.vad.decision.cpu_ms"
DECISION_FRAMES = "lab.vad.decision.frames"
TRANSCRIPT = "lab.asr.text"
ASR_LANGUAGE = "lab.asr.language"  # the transcript's language: given, or detected when the question had none
HEARD_QUESTION = "lab.asr.heard_question"  # the fixture question an upload matched (speech service's oracle), "" none
HEARD_SCORE = "lab.asr.heard_score"  # how well it matched: the cosine of the clips' band envelopes, 0..1
SENTENCE_INDEX = "lab.sentence.index"
SENTENCE_TEXT = "lab.sentence.text"
SENTENCE_CALL = "lab.sentence.call_index"
CALL_INDEX = "lab.llm.call_index"
CALL_PURPOSE = "lab.llm.purpose"
PROMPT_CACHED_TOKENS = "lab.llm.prompt_cached_tokens"  # of gen_ai.usage.input_tokens, served from a cache
SERVER_TIMING_PREFIX = "lab.llm.server."  # + timing name, e.g. prompt_ms
# server-side timings an LLM server may report (llama.cpp `timings`, our emulated cloud)
SERVER_QUEUE_MS = SERVER_TIMING_PREFIX + "queue_ms"
SERVER_PROMPT_MS = SERVER_TIMING_PREFIX + "prompt_ms"  # first-token inference (prompt processing)
SERVER_PREDICTED_MS = SERVER_TIMING_PREFIX + "predicted_ms"  # generation
TOOL_NAME = "gen_ai.tool.name"
TOOL_WHERE = "lab.tool.where"  # "device": a tool run on the device, called over its link
RPC_REQUEST_ID = "rpc.jsonrpc.request_id"  # a device tool call's JSON-RPC id (OpenTelemetry RPC conventions)
AUDIO_MS = "lab.audio_ms"
TRANSPORT = "lab.transport"  # "websocket", ...
SOUND_ONLY_TRANSPORTS = ("twilio",)  # a device's transport that carries the answer's sound and none of its text
PROTOCOL_VERSION = "lab.transport.protocol_version"
UPLINK_FRAMES = "lab.transport.uplink_frames"
DOWNLINK_FRAMES = "lab.transport.downlink_frames"
UNDECODABLE_FRAMES = "lab.transport.undecodable_frames"
DROPPED_FRAMES = "lab.transport.dropped_frames"  # a device's: audio outside tts start .. stop, not played
RECONNECTS = "lab.transport.reconnects"  # a device's: the connection opened again before the turn
# a device's turn that opened its lost connection again: tries made, from the loss to the server's answer to
# the new hello (the time to be answered again), and from the question's first try to that answer
RECONNECT_TRIES = "lab.transport.reconnect_tries"
RECONNECT_MS = "lab.transport.reconnect_ms"
RECONNECT_WAIT_MS = "lab.transport.reconnect_wait_ms"
# a device's turn: cold_connection (the first on its connection: connect, hello, MCP set-up just before),
# cold_wake (started by a wake word mid-answer), warm (the rest)
TURN_TEMPERATURE = "lab.turn.temperature"
# how the device knew where the answer began and ended: "told" (the server marks it: xiaozhi's tts start / stop),
# "inferred" (found from the sound alone: Twilio's wire marks no answer)
ANSWER_EDGES = "lab.device.answer_edges"
TURN_TEMPERATURES = ("cold_connection", "cold_wake", "warm")
PACKETS_RECEIVED = "lab.transport.packets_received"  # lossy transports: this side's incoming audio packets
PACKETS_LOST = "lab.transport.packets_lost"
PACKETS_LATE = "lab.transport.packets_late"
DROPPED = "lab.transport.dropped"  # a server: what its session dropped since the last turn, "what=count; ..."
DOWNLINK_FRAMES_SENT = "lab.transport.downlink_frames_sent"

# GenAI semantic conventions
GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_MODEL = "gen_ai.request.model"
GEN_AI_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_FINISH = "gen_ai.response.finish_reasons"
SERVER_ADDRESS = "server.address"

# a request served by the lab's speech services (pipeline/endpoints/speech): its span is the stage's (ASR, TTS)
HTTP_ROUTE = "http.route"  # OpenTelemetry HTTP conventions
HTTP_STATUS = "http.response.status_code"
SERVICE_MODEL = "lab.service.request_model"  # the model the client named; the configured stage is what served it
SERVICE_FORMAT = "lab.service.response_format"
SERVICE_VOICE = "lab.service.request_voice"  # the voice the client named (TTS); the configured voice is what spoke
SERVICE_INPUT_BYTES = "lab.service.input_bytes"  # the uploaded file (ASR) or the request body (TTS)
SERVICE_OUTPUT_BYTES = "lab.service.output_bytes"  # the response body
SERVICE_INPUT_FORMAT = "lab.service.input_format"  # what libsndfile read the upload as, e.g. "WAV PCM_16"
SERVICE_READ_MS = "lab.service.read_ms"  # receiving and parsing the request body
SERVICE_DECODE_MS = "lab.service.decode_ms"  # the upload to 16 kHz mono PCM (ASR)
SERVICE_COMPUTE_MS = "lab.service.compute_ms"  # the stage itself
SERVICE_ENCODE_MS = "lab.service.encode_ms"  # the stage's audio to the response format (TTS)
