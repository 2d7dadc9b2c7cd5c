"""Selection learning, beside selection (`app/pipeline/elo_selector.py`, `selectors.py`,
`app/models/elo.py`, `app/models/selection.py`): what outcomes teach the model selection.

- `ratings`: the Elo ratings document in the shared store (`RatingStore`), which the Routers
  read (`elo_selector.RatingsFeed`) and outcomes update;
- `elo_feedback`: the games an outcome plays for an `algorithm.type: elo` decision;
- `recipe_learning`: recipe proposals from replays and outcomes (`svc-sr optimize`).
"""
