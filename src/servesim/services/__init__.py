"""One question, one function: the use cases every interface calls.

Why: the CLI, the web workbench, the dashboard, the emulator's setup, the demo and the report used
to each write their own workflow, and the same question got different answers depending on where
it was asked. Here each question has one typed request (a Pydantic model an interface builds from
its flags, form or file) and one function that answers it with a typed answer:

* ``services.run``        — a run: one replica (``SimulateRequest``), an aggregated cluster or
  prefill/decode pools, with failures (``ClusterRequest``);
* ``services.capacity``   — a saturation sweep (``SaturateRequest``), and what the capacity
  questions share (where the runs go, the traffic, the deployment checked before any work);
* ``services.tune``       — a tuning study and its recommendation (``TuneRequest``);
* ``services.layouts``    — aggregated or disaggregated at one GPU budget (``LayoutsRequest``);
* ``services.recovery``, ``services.rescheduling``, ``services.advice`` — a recovery plan, a
  rescheduling, an advice; ``services.scenario`` — a question in a scenario file;
* ``services.traces``, ``services.generate`` — reading, inspecting, converting, generating traces;
* ``services.perf``, ``services.calibration``, ``services.measured`` — the step-time and memory
  model, its calibration and sim2real check, measured runs replayed.
* ``services.deployment`` — the deployment every request names (``servesim.spec``'s models, the
  SLO parser, ``resolve``), re-exported so that an interface imports no library directly.

An interface only builds a request, calls the function, and renders the answer with
``servesim.views`` (its ``--json`` document with ``servesim.report.documents``): no shortlisting,
verification seeds, capacity, cost or comparison logic lives above this layer. The services sit
above the libraries (engine, cluster, tuning, advisor) and below views and report; import-linter
checks both (``pyproject.toml``), and that an interface imports no library directly: the types an
interface needs to build a request or render an answer are re-exported by the matching service
(in its ``__all__``).

Submodules are imported where used (``from servesim.services.run import simulate``): the package
itself imports nothing heavy, so a command that needs one service pays only for that one.
"""
