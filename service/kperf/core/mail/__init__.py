"""Mail: alerts out, replies and patch series in.

`alerts` composes and sends the plain-text mail, only to `recipients` a user
owns or confirmed (`confirmations`); `mailbox` (IMAP) and `listener` (LMTP)
take mail in, `authentication` decides whether the receiving MTA vouched for
its sender, `inbound` turns it into a submission or a reply, and `replies`
and `commands` act on a reply to an alert.
"""
