"""Training, beside the runtime and never imported by it: the apply model's fine-tune
(`finetune/`), the DSpark drafter's trainer (`drafter/`) and the copy acceptance fit
(`calibrate.py`). They use the runtime (the engine answers prompts, the drafting core drafts);
the runtime (`apply`, `batch`, `engine/`, `drafting/`, `edit/`) imports nothing from here.
"""
