"""route()'s request phases, one module each, in the order RouterPipeline runs them:

parse (request -> validated chat body, RoutePlan, SignalContext) -> signals (the
referenced signal families and the global guard, concurrently) -> decide (decision
engine) -> guard (the decision's jailbreak/pii plugins; 403 blocks) -> plugins
(fast_response) -> select (model selection) -> cache (response-cache lookup/write) ->
plugins (request mutations). An explicit model skips to select's pass-through.
Each phase reads the per-version `CompiledConfig` and writes its results into the plan.
"""
