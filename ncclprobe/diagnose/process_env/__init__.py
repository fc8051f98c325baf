"""Which NCCL settings each process of a running job really has (`env-check`): expectations and
lint of each environment (`expect`), the result (`report`), the walk and judgement as one call
(`check.env_check`), and what an env-check document says in a diagnosis (`rules_envcheck`)."""
