A='x
B='y'
