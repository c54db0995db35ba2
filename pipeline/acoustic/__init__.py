"""Measures what a person hears, from a recording alone: the silence before each answer and the whole turn.

Given a recording and the questions the lab played (their audio, nothing the run wrote), it finds where
each question was played, where its speech ended, and when the answer was first and last audible, and
writes the turns as rows named as the device rows' columns, ``measured_by`` ``acoustic``
(``python -m pipeline.acoustic measure``). It reads the emulator's stereo recordings (microphone left,
speaker right) exactly to the sample, a single room microphone that hears both, through noise,
reverberation and an unknown sound-card delay, and such a microphone beside what the speaker was fed.

- ``questions``: the questions as played: each clip's audio and its end of speech (its truth's, where the
  question carries one; else the run's VAD).
- ``recording``: a recording read and checked: its microphone and speaker channels, what was clipped.
- ``bands``: a clip's log band energies, and their correlation with a recording's (robust to a room).
- ``align``: where each question was played: its band pattern found, its direct sound placed by the waveform.
- ``schedule``: the order the replay plays the questions in, and the order-keeping choice of matches.
- ``tail``: the question's own sound after its end of speech (its trailing audio, the room's decay of it).
- ``onset``: an answer's first and last audible sample, on a clean channel or a room microphone.
- ``feed``: an answer the speaker was fed, found in a room microphone by its waveform (layout ``room-feed``).
- ``measure``: a recording's turns, from the pieces above, as acoustic rows (their record, CSV writer and
  reader: ``pipeline.records.acoustic``).
- ``room``: a simulated room (pyroomacoustics, image sources to the order its RT60 needs, the RT60 measured) that
  renders what one microphone hears of a stereo recording.
- ``sound``: the operating system's audio devices: play and record (``run``).
- ``sound_server``: a private PulseAudio daemon with a null sink and its monitor, for the tests and benches.
- ``run``: ``python -m pipeline.acoustic run``: play the questions to a real device and measure what it says.
"""
