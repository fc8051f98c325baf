"""Where an engine run's time goes: one pure function per hypothesis over the run's evidence (our
engine trace, profiler traces of any engine, server logs), with what each phase should cost
(`expectations`) and what a cost is in the user's units (`run_costs`, `profile_costs`)."""
