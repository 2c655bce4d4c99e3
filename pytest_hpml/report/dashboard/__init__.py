"""The history dashboard: a static site of every metric of the baseline files over its saves
(`python -m pytest_hpml dashboard BASELINES... -o SITE/`; the `dashboard` extra installs the
charting library, plotly, whose JavaScript the site carries). A report stage: it reads files
and never imports a hook module.

    series.py    the baseline files (and the latest runs' reports) read into series: a
                 metric of a row on a machine and profile, its saves with their dates and
                 commits, its accepted levels; a file that cannot be used is one line
    judging.py   the numbers, by the comparison engine's own functions: level, latest
                 verdict, detectable change, blind spots
    charts.py    the plotly.js figures: a metric's history, a sweep's rows together
    pages.py     the HTML: the index table and the metric pages
    site.py      the build: pages written into a new folder, swapped in whole
    command.py   the command line's `dashboard` subcommand
    dashboard.js, dashboard.css   the site's own sorting, filtering and drawing
"""
