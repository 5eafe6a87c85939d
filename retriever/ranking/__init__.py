"""What methods rank over and how a ranking is cut: index protocol, budgets, document pooling."""
