"""The operator's command line (`python -m warmstart_cli`): plan and estimate, the preflights before a deploy,
and status read through the user's kubeconfig. It is what runs `aws` and `kubectl` and draws plots; the domain
package (`warmstart/`) it reads stays pure."""
