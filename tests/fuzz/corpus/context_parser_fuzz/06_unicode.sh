A='héllo ✓'
B=ün
