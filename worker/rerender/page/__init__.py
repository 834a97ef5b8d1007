"""The drift page of a re-render run: one self-contained HTML file (`--html`, `prompt-worker
report`), made afterwards from the run's input and output files.

`page_data` reads the two files side by side and gathers what the page shows,
`changes` tells which changed jobs made the same change and draws its diff as rows,
and `drift_page` puts the data into `drift.html` with its style sheet (`drift.css`)
and script (`drift.js`). The comparison of one job's messages is `worker.rerender.drift`;
the run's JSON report and summary are `worker.rerender.run_report`.
"""
