"""The server's end of the xiaozhi wire: front doors, one session per device, one turn per utterance.

``websocket`` and ``mqtt_front`` (with ``mqtt_connection``) accept devices and hand each a
``ServerChannel`` (``channel``); ``session`` runs the conversation as xiaozhi-esp32-server does,
``turn`` runs one turn's stages and tells the device, paced by ``pacing``; ``ota`` tells a stock
firmware where to connect; ``lab_turns`` is the lab's run behind it all. Nothing here imports the
device side.
"""
