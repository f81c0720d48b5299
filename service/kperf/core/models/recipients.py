"""Addresses besides their own that users have results mailed to (docs/submitting.md, "Who gets the result mail")."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class RecipientAddress(models.Model):
    """An address a user asked kperf to mail results to, and whether the address's owner agreed.

    kperf mails an address the user names (`mail_to`) only once whoever
    reads it has followed the link kperf mailed there: otherwise anyone
    with an account could have kperf mail anyone. Confirmed for this user
    only; another user must ask again.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="recipient_addresses")
    # Lower case: it is compared with the addresses of submissions the same way.
    address = models.CharField(max_length=254)
    # sha256 of the token in the link mailed to the address; "" once confirmed.
    token_hash = models.CharField(max_length=64, blank=True, default="", db_index=True)
    requested = models.DateTimeField()
    expires = models.DateTimeField()
    confirmed = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["address"]
        verbose_name_plural = "recipient addresses"
        constraints = [models.UniqueConstraint(fields=["user", "address"], name="recipient_address_once_per_user")]

    def __str__(self) -> str:
        return f"{self.address} for {self.user_id}: {'confirmed' if self.confirmed else 'pending'}"
