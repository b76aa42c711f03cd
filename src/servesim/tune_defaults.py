"""The tuning study's defaults: one source for ``servesim tune``, the web's Tune tab and its API
body, the tune service and the tuner's own settings.

Why: the same question must get the same answer from every interface. When the web's study
defaulted to 12 trials of one seed, verified on 2 seeds, and the CLI's to 40 x 2 verified on 3,
the same trace and SLO got two different recommendations. Kept free of imports so that the CLI's
option tables read it without loading the tuner.
"""

from __future__ import annotations

TRIALS = 40  # trials one run adds to the study
TRIAL_SEEDS = 2  # seeds (replicates) each trial is simulated on
VERIFY_SEEDS = 3  # fresh seeds re-verifying the recommendation (and its headroom)
#: trials the study asks per round (Optuna's ask/tell). Fixed, not the number of workers: TPE's
#: suggestions depend on how many trials are told before the next ask, so a batch that followed
#: ``--jobs`` made the CLI (2 workers) and the web (1) recommend different deployments.
BATCH = 2
