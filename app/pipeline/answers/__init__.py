"""Response-side plugins: `response_jailbreak` and `hallucination` check the ANSWER.

`schemas.py`: the policy a plan carries to the front door and the verdict it gets back;
`policy.py`: outcome -> action, and the preview functions of the plugins API;
`hallucination.py`: the unsupported-claim detector (its helpers also feed `nli.py`, the NLI
head of POST /api/v1/diagnostics/nli); `checker.py`: runs both in the Router.
The front door side (when to check, header/annotate/block) is app/exchange/answer_checks.py.
"""
