"""The device's end of the xiaozhi wire: the lab's emulated device, as a stock firmware behaves on the wire.

``device_settings`` says how it behaves; ``dial`` opens the ``link`` a URL names (``websocket_link``,
``mqtt_udp_link``, which asks an OTA endpoint where to connect: ``ota_client``), each guarded against a hostile
server (``downlink_guard``); ``device`` holds the session and asks questions, opening a lost connection again on the
firmware's backoff (``reconnect``); ``device_turn`` runs one (clip out, answer in, playout, barge-in);
``microphone`` streams in realtime mode, its packets encoded once (``uplink_packets``) and sent on the loop's one
schedule (``pacer``, which records how late each send went); ``tools`` answers MCP as the firmware does; ``speaker``
plays its answers, and its user's questions, into sound devices; ``device_recording`` writes what it sent and played
(``--record-audio``). A caller of a voice bot holds one call on a line paced in real time (``phone_line``), on
Twilio Media Streams (``twilio_call``) or Pipecat's own wire (``pipecat_call``), and hears each answer through a
phone's playout buffer, which infers where the answer begins and ends from the audio as played (``phone_playout``),
and records what was said and played (``phone_recording``); as a run's device (``phone_device``) each question is a
turn on that call. ``devices`` makes the device a server URL names, either kind. Nothing here imports the server
side.
"""
