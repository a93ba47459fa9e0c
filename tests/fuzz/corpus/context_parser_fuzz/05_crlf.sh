A='x'
B='l1
l2'
