"""Caller IDs of the seeded demo customers (see rejoinder.app.db)."""

MARIA = "+15550101"  # orders 4217 (shipped) + 5031 (processing); haircut 101 Tue 10:00
JAMES = "+15550102"  # orders 3388 (delivered) + 6120 (cancelled); consultation 102 Wed 14:00
AISHA = "+15550103"  # order 7002; haircut 103 Fri 14:00 + consultation 106 Thu 10:00
TOM = "+15550104"  # order 2459; consultation 104 Fri 11:00
LENA = "+15550105"  # order 8814; no booked appointment (105 is cancelled)
