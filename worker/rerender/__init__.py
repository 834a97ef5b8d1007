"""Batch re-rendering of past sessions (`prompt-worker rerender`).

The data path, one walk: `lines` cuts the input into blocks of whole lines and turns a
line into a job body (plus the messages sent before, if the line has them); an engine
(`local`: in-process / a pool of processes, `broker`: the worker fleet over RabbitMQ)
turns job bodies into replies; `records` turns a reply into an output record and tallies
it (`drift` compares a job's messages with those sent before, and diffs them); `run`
writes records in input order, resumes, writes the run's report (`run_report`) and shows
progress (`progress`).

The drift page is made afterwards from the run's files, in its own package (`page`).
"""
