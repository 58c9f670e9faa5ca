"""web_gen_env: an unlimited supply of generated web form tasks (issue: "unlimited form tasks").

- vocab.py: label vocabularies (train labels, held-out test labels), values, options and page texts;
- spec.py: `draw(seed, split, layout)` -> FormSpec, pure Python and deterministic per seed;
- phrasing.py: the instruction text and its rules (case, date format, ordinals, popups, confirm);
- form.html + form.js: the one page that builds any spec's form and judges it (MiniWoB-style raw reward);
- env.py: WebGenEnv, web_form_env with its page hooks overridden, and the suite (train/test/test_families);
- expert.py: the expert and the noisy expert.
"""
