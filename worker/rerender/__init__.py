"""Batch re-rendering of past sessions (`prompt-worker rerender`).

The data path, one walk: `lines` cuts the input into blocks of whole lines and turns a
line into a job body (plus the messages sent before, if the line has them); an engine
(`local`: in-process / a pool of processes, `broker`: the worker fleet over RabbitMQ)
turns job bodies into replies; `records` turns a reply into an output record and tallies
it (`drift` compares and diffs messages); `run` writes records in input order, resumes,
reports (`report`) and shows progress (`progress`).

The drift page is made afterwards from the run's files: `page_data` reads the input and
the output side by side, `changes` tells which changed jobs made the same change and
draws its diff as rows, and `drift_page` puts the data into `page/drift.html` with its
style sheet and script.
"""
