"""Pure scoring arithmetic: embedding similarities and rankings, score moments, n-gram LMs."""
