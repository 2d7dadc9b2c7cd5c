"""`svc-sr benchmark`: routing quality measured on recorded answers (issue 17)."""
