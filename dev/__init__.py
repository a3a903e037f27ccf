"""Development tools that drive the real package: ISA checks, A/B builds, profiling. Not shipped."""
