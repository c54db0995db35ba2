"""The server's end of the xiaozhi wire: front doors, one session per device, one turn per utterance.

- Front doors, opened together by ``front_doors`` (what devices are told: ``told_address``): ``websocket``;
  ``mqtt_front`` with ``mqtt_connection`` (one device's MQTT connection) and ``mqtt_channel`` (its session's
  control and UDP audio); ``ota_endpoint`` tells a stock firmware where to connect. Each hands a session a
  ``channel`` (``ServerChannel``); which Host and Origin a request may name: ``origins``.
- A session (``device_session``) runs the conversation as xiaozhi-esp32-server does, under ``server_settings``:
  what it hears (``uplink``), what starts a turn (``requests``), the wake reply (``wake``), the idle rules
  (``idle``), the flood guard (``flood``), what it counts and does not act on (``ignored``), the text it shows
  (``texts``), the device's MCP tools (``device_tools``).
- A turn (``server_turn``) runs the stages and tells the device, its audio paced by ``pacing``.
- Server processes on one WebSocket port (``processes``: ``pipeline.serve --processes N``), restarted
  (``supervisor``) within a budget (``restart_budget``), each restart written down (``restart_record``).

Nothing here imports the device side.
"""
