"""Throwaway CAs and leaf certificates for tests: the product's own, valid a day."""

from apollo11.scheduler.security.certs import make_ca, make_leaf

__all__ = ["make_ca", "make_leaf"]
