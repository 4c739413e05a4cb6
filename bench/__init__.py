"""The benchmarks and simulations: scripts that print figures (README.md, "Benchmarks"); a package so
that one imports another by full name, as the tests do."""
